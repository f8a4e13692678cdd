"""RL's demonstration replay (`rl.replay_demonstrations`): which demonstrations are drawn and what loss they carry."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxwebrl.config import default_config, parse_config, with_changes
from jaxwebrl.data.records import Trajectory, Turn, write_jsonl
from jaxwebrl.main_job.online import demonstration_samples, demonstrations_to_replay
from jaxwebrl.train.losses import LossConfig, grpo_loss


def _demos(n: int = 6) -> list[Trajectory]:
    # demo i: two turns with 2 and 1 response tokens
    return [Trajectory(f"miniwob.t{i % 2}", [Turn([1, 2], [10 + i, 3]), Turn([1, 2, 10 + i, 3, 4], [20 + i])],
                       reward=1.0) for i in range(n)]


def _cfg(replay: int, advantage: float = 0.5):
    cfg = default_config()
    cfg.rl.replay_demonstrations, cfg.rl.demonstration_advantage = replay, advantage
    cfg.data.per, cfg.data.norm = "turn", "webagent_r1"
    return parse_config(cfg)


def test_draws_distinct_demonstrations_per_iteration_reproducibly():
    demos, cfg = _demos(), _cfg(3)
    def firsts(it: int) -> list[int]:  # the demos drawn, by the id in their first turn's response
        return sorted(int(s.tokens[2]) - 10 for s in demonstration_samples(demos, cfg, it) if len(s) == 4)

    assert len(set(firsts(0))) == 3 and firsts(0) == firsts(0)  # a resumed run draws the same
    assert any(firsts(it) != firsts(0) for it in range(1, 5))
    assert len(demonstration_samples(demos, _cfg(50), 0)) == 2 * len(demos)  # capped at what there is


def test_each_demonstration_is_a_group_whose_loss_is_minus_its_advantage_at_ratio_one():
    samples = demonstration_samples(_demos(), _cfg(2, advantage=0.5), 0)
    assert {float(a) for s in samples for a in s.advantages[s.loss_mask == 1]} == {0.5}
    lp = [jnp.asarray(-np.arange(len(s), dtype=np.float32) / 10) for s in samples]
    out = [grpo_loss(LossConfig(kind="grpo", beta=0.0), l, {
        "loss_mask": jnp.asarray(s.loss_mask), "advantages": jnp.asarray(s.advantages), "old_logprobs": l,
        "norm_weight": jnp.asarray(s.norm_weight), "norm_denom": jnp.asarray(s.norm_denom)}) for s, l in zip(samples, lp)]
    # webagent_r1: each token weighs 1/(G |tau| |a|) with G = 1, so a demo's weights sum to 1 and it is one group
    loss = sum(float(o[0]) for o in out) / sum(float(o[1]) for o in out)
    assert loss == pytest.approx(-0.5)
    assert sum(float(o[1]) for o in out) == pytest.approx(2.0)


def test_replay_needs_a_demonstration_file(tmp_path):
    assert demonstrations_to_replay(_cfg(0)) == []
    cfg = with_changes(_cfg(4), **{"rl.demonstrations_file": str(tmp_path / "missing.jsonl")})
    with pytest.raises(ValueError, match="rl.demonstrations_file=.*is not a file.*bc.enabled=True"):
        demonstrations_to_replay(cfg)
    write_jsonl(tmp_path / "d.jsonl", _demos(3))
    cfg = with_changes(cfg, **{"rl.demonstrations_file": str(tmp_path / "d.jsonl")})
    assert [t.task_id for t in demonstrations_to_replay(cfg)] == ["miniwob.t0", "miniwob.t1", "miniwob.t0"]
