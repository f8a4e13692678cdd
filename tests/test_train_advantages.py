"""Group advantages, dynamic sampling, WebGym / BrowserAgent / OpenWebRL filters, worked by hand."""

import math

import numpy as np
import pytest

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.recipes.browseragent import rft_select
from jaxwebrl.recipes.openwebrl import openwebrl_reward
from jaxwebrl.recipes.webgym import webgym_filter
from jaxwebrl.train.advantages import (
    DynamicSamplingCollector, assign_group_advantages, drop_zero_variance_groups, group_advantages, mask_failed,
)


def test_group_advantages_mean_std():
    a = group_advantages([1, 0, 0, 0, 1, 1], ["a", "a", "a", "a", "b", "b"], eps=0.0)
    # group a: mean .25, std sqrt(.1875)=.4330 -> (.75/.433, -.25/.433 x3); group b: all equal -> 0
    s = math.sqrt(0.1875)
    np.testing.assert_allclose(a[:4], [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s], rtol=1e-6)
    np.testing.assert_allclose(a[4:], [0, 0])
    b = group_advantages([1, 0, 0, 0], ["a"] * 4, scale_by_std=False)
    np.testing.assert_allclose(b, [0.75, -0.25, -0.25, -0.25], rtol=1e-6)


def _traj(task, r, group=None, n=1, **kw):
    return Trajectory(task, [Turn([1, 2], [3, 4], observation=f"o{i}") for i in range(n)], reward=r,
                      group_id=group or task, **kw)


def test_dynamic_sampling():
    ts = [_traj("a", 1), _traj("a", 0), _traj("b", 1), _traj("b", 1)]
    assert [t.task_id for t in drop_zero_variance_groups(ts)] == ["a", "a"]
    c = DynamicSamplingCollector(target_groups=2, group_size=2)
    assert not c.add(ts[2:])  # zero variance
    assert c.add(ts[:2]) and not c.done and c.needed == 1
    assert c.add([_traj("c", 0), _traj("c", 1)]) and c.done
    assert not c.add([_traj("d", 0), _traj("d", 1)])  # already full
    batch = c.take()
    assert len(batch) == 4 and not c.groups
    adv = assign_group_advantages(batch, eps=0.0)
    assert [t.advantage for t in adv] == [1.0, -1.0, -1.0, 1.0]


def test_webgym_filter():
    ok = Trajectory("a", [Turn([1], [2], observation="x"), Turn([1], [3], observation="x"),
                          Turn([1], [4], observation="y")], reward=1.0)
    bad = Trajectory("b", [Turn([1], [2])], reward=0.0)
    (t,) = webgym_filter([ok, bad])
    assert t.advantage == 1.0
    # step 0's next observation equals its own -> dropped; steps 1 and 2 kept
    assert [turn.mask for turn in t.turns] == [[0], [1], [1]]


def test_rft_select():
    k = 4
    ts = [_traj("easy", 1, n=2), _traj("easy", 1, n=3), _traj("easy", 1), _traj("easy", 1),  # 4/4 correct: drop
          _traj("mid", 1, n=2), _traj("mid", 1, n=5), _traj("mid", 0, n=7), _traj("mid", 0),
          _traj("hard", 0), _traj("hard", 0), _traj("hard", 0), _traj("hard", 0)]
    ts[5].turns[1].format_ok = False  # the longest correct one is malformed -> next longest
    out = rft_select(ts, k)
    assert [(t.task_id, len(t.turns)) for t in out] == [("mid", 2)]


def test_openwebrl_reward_and_failures():
    assert openwebrl_reward(_traj("a", 0, termination="done"), True) == 1.0
    assert openwebrl_reward(_traj("a", 0, termination="done"), False) == 0.0
    assert openwebrl_reward(_traj("a", 0, termination="format_error"), None) == -1.0
    assert openwebrl_reward(_traj("a", 0, termination="max_steps"), None) == 0.0
    (t,) = mask_failed([_traj("a", 0, termination="judge_error")])
    assert t.turns[0].mask == [0, 0]


def test_masked_trajectories_do_not_enter_group_statistics():
    # Group g: A=1, B=0, C=1 but C ended in env_error (mask 0): mean .5, std .5 over A and B -> +1, -1; C gets 0.
    # (Counting C would give mean 2/3, std .471 -> A +.71, B -1.41.) Group h: D=0, E=1 (judge_error) -> D alone, 0.
    ts = mask_failed([_traj("g", 1), _traj("g", 0), _traj("g", 1, termination="env_error"),
                      _traj("h", 0), _traj("h", 1, termination="judge_error")])
    assert [t.num_trained_turns for t in ts] == [1, 1, 0, 1, 0]
    adv = assign_group_advantages(ts, eps=0.0)
    assert [t.advantage for t in adv] == [1.0, -1.0, 0.0, 0.0, 0.0]
    adv = assign_group_advantages(ts, scale_by_std=False)  # Dr. GRPO: mean only
    assert [t.advantage for t in adv] == [0.5, -0.5, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(group_advantages([1, 0, 1], ["g"] * 3, eps=0.0, present=[True, True, False]),
                               [1.0, -1.0, 0.0])
    # Dynamic sampling: group h's only disagreement is its masked member, so it carries no signal.
    assert [t.task_id for t in drop_zero_variance_groups(ts)] == ["g", "g", "g"]
    c = DynamicSamplingCollector(target_groups=1, group_size=2)
    assert not c.add(ts[3:]) and c.dropped == 1
    with pytest.raises(ValueError, match="present has 2 entries for 3 rewards"):
        group_advantages([1, 0, 1], ["g"] * 3, present=[True, False])


def test_step_discount_tells_a_success_at_once_from_one_after_wasted_steps():
    """reward.step_discount: success x gamma ** (turns - 1), worked by hand; penalties and failures unchanged."""
    from jaxwebrl.config import ConfigError
    from jaxwebrl.recipes.config import RewardConfig
    from jaxwebrl.recipes.papers import get_recipe
    from jaxwebrl.recipes.registry import accept_group, assign_rewards

    recipe = get_recipe("webagent_r1")
    group = [_traj("a", 0, n=1, metadata={"success": True}), _traj("a", 0, n=3, metadata={"success": True}),
             _traj("a", 0, n=6, metadata={"success": False, "raw_reward": -1.0})]
    assert not accept_group(recipe, group[:2], dynamic_sampling=True)  # undiscounted: both 1, no signal
    assign_rewards(recipe, group, "rule", step_discount=0.5)
    assert [t.reward for t in group] == [1.0, 0.25, 0.0]
    assert accept_group(recipe, group[:2], dynamic_sampling=True, step_discount=0.5)
    adv = assign_group_advantages(group[:2], eps=0.0)
    assert adv[0].advantage == pytest.approx(1.0) and adv[1].advantage == pytest.approx(-1.0)
    assign_rewards(recipe, group, "raw", step_discount=0.5)  # MiniWoB's -1 for a wrong submit is not softened
    assert group[2].reward == -1.0
    with pytest.raises(ConfigError, match=r"step_discount: 0 is not in \(0, 1\]"):
        RewardConfig(step_discount=0)
