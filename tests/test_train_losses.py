"""Losses, normalisation modes and advantages against values worked out by hand."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.data.samples import build_samples, with_context_loss
from jaxwebrl.models.logprobs import token_logprobs, token_logprobs_and_entropy
from jaxwebrl.train.losses import LossConfig, grpo_loss, kl_penalty, sft_loss


def _t(**kw):
    return {k: jnp.asarray(v, jnp.float32) for k, v in kw.items()}


def test_logprobs_and_entropy_in_one_pass_against_numpy():
    """The train step's fused logprob + entropy equals log softmax[target] and -sum p log p worked out in
    float64 numpy, and its logprobs equal the sampler's `token_logprobs` (the one shared definition)."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 5, 50)) * 4.0
    logits[0, 0, 7] = 60.0  # a near one-hot row: entropy ~0, logprob of the rest very negative
    targets = rng.integers(0, 50, (3, 5))
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    want_lp = np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    want_ent = -(np.exp(logp) * logp).sum(-1)
    lp, ent = token_logprobs_and_entropy(jnp.asarray(logits, jnp.float32), jnp.asarray(targets))
    np.testing.assert_allclose(np.asarray(lp), want_lp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent), want_ent, rtol=1e-5, atol=1e-5)
    assert want_ent[0, 0] < 1e-6 and want_ent.max() > 1.0  # both regimes present
    np.testing.assert_array_equal(np.asarray(lp), np.asarray(token_logprobs(jnp.asarray(logits, jnp.float32), jnp.asarray(targets))))


def test_sft_weighted_nll():
    lp = jnp.asarray([-1.0, -2.0, -0.5, -3.0])
    t = _t(loss_mask=[1, 1, 0, 1], advantages=[1, 1, 1, 0.5], norm_weight=[1, 1, 1, 1], norm_denom=[1, 1, 0, 1])
    loss_sum, denom, sums = sft_loss(LossConfig(kind="sft"), lp, t)
    # 1*1 + 1*2 + (masked) + 0.5*3 = 4.5 over 3 tokens
    assert float(loss_sum) == pytest.approx(4.5)
    assert float(denom) == 3.0
    assert float(sums["nll"]) == pytest.approx(6.0)


def test_grpo_asymmetric_clip():
    old = [-1.0, -1.0, -1.0, -1.0]
    lp = jnp.asarray([-1.0, -0.5, -2.0, -1.2])
    t = _t(loss_mask=[1, 1, 1, 1], advantages=[1, 1, -1, -1], old_logprobs=old, norm_weight=[1] * 4, norm_denom=[1] * 4)
    cfg = LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28)
    loss_sum, denom, sums = grpo_loss(cfg, lp, t)
    # tok0 r=1 -> obj 1; tok1 r=e^.5=1.6487>1.28 -> obj 1.28 (clipped);
    # tok2 r=e^-1=.3679, A=-1: min(-.3679, -.8) = -.8 (clipped); tok3 r=e^-.2=.8187 in range -> -.8187
    expected = -(1.0 + 1.28 - 0.8 - math.exp(-0.2))
    assert float(loss_sum) == pytest.approx(expected, rel=1e-6)
    assert float(denom) == 4.0
    assert float(sums["clip_frac"]) == 2.0
    # approx KL(old||new) k3 = sum exp(d) - 1 - d with d = lp - old
    d = [0.0, 0.5, -1.0, -0.2]
    assert float(sums["approx_kl"]) == pytest.approx(sum(math.exp(x) - 1 - x for x in d), rel=1e-6)


def test_grpo_dual_clip_and_symmetric():
    lp = jnp.asarray([-1.0 + 1.5, -1.0 + 1.5])
    t = _t(loss_mask=[1, 1], advantages=[-1.0, 1.0], old_logprobs=[-1.0, -1.0], norm_weight=[1, 1], norm_denom=[1, 1])
    # r = e^1.5 = 4.4817. A=-1: min(-4.48, -1.2) = -4.48; dual clip c=3 -> max(-4.48, -3) = -3.
    # A=+1: min(4.48, 1.2) = 1.2.
    loss_sum, _, sums = grpo_loss(LossConfig(kind="grpo", eps_low=0.2, eps_high=0.2, dual_clip=3.0), lp, t)
    assert float(loss_sum) == pytest.approx(-(-3.0 + 1.2), rel=1e-6)
    assert float(sums["dual_clip_frac"]) == 1.0
    loss_sum, _, _ = grpo_loss(LossConfig(kind="grpo", eps_low=0.2, eps_high=0.2), lp, t)
    assert float(loss_sum) == pytest.approx(-(-math.exp(1.5) + 1.2), rel=1e-6)


@pytest.mark.parametrize("est", ["k1", "k2", "k3"])
def test_grpo_kl_estimators(est):
    lp = jnp.asarray([-1.0, -2.0])
    ref = [-1.5, -1.0]
    t = _t(loss_mask=[1, 1], advantages=[0.0, 0.0], old_logprobs=[-1.0, -2.0], ref_logprobs=ref,
           norm_weight=[1, 1], norm_denom=[1, 1])
    beta = 0.1
    loss_sum, _, sums = grpo_loss(LossConfig(kind="grpo", beta=beta, kl_estimator=est), lp, t)
    d = [0.5, -1.0]  # log pi - log pi_ref
    by_hand = {"k1": sum(d), "k2": sum(0.5 * x * x for x in d), "k3": sum(math.exp(-x) - 1 + x for x in d)}[est]
    assert float(loss_sum) == pytest.approx(beta * by_hand, rel=1e-6)  # advantages 0: only the KL term
    assert float(sums["kl_ref"]) == pytest.approx(by_hand, rel=1e-6)
    assert float(kl_penalty(jnp.asarray(0.3), jnp.asarray(0.3), est)) == 0.0


# ---- normalisation modes ------------------------------------------------------------------------
# Group of G=2: trajectory A has turns with 2 and 1 trained tokens, B one turn with 2 tokens.
# Per-token NLL by token id: 7->1, 8->2 (A turn 0), 10->3 (A turn 1), 11->4, 12->5 (B).
NLL = {7: 1.0, 8: 2.0, 10: 3.0, 11: 4.0, 12: 5.0}


def _group():
    a = Trajectory("t", [Turn([5, 6], [7, 8]), Turn([5, 6, 7, 8, 9], [10])], group_id="g")
    b = Trajectory("t", [Turn([5, 6], [11, 12])], group_id="g")
    return [a, b]


def _loss(samples, split=False):
    parts = []
    for s in samples:
        lp = -np.asarray([NLL.get(int(x), 0.0) for x in s.tokens], np.float32)
        t = _t(loss_mask=s.loss_mask, advantages=s.advantages, norm_weight=s.norm_weight, norm_denom=s.norm_denom)
        parts.append(sft_loss(LossConfig(kind="sft"), jnp.asarray(lp), t))
    return sum(float(p[0]) for p in parts) / sum(float(p[1]) for p in parts)


@pytest.mark.parametrize("per,norm,expected", [
    # 1/G * 1/|tau| * 1/|a|: A0 (1+2)/(2*2*2)=.375, A1 3/(2*2*1)=.75, B 9/(2*1*2)=2.25; 1 group
    ("trajectory", "webagent_r1", 3.375),
    ("turn", "webagent_r1", 3.375),
    # no 1/|tau|: A0 3/(2*2)=.75, A1 3/2=1.5, B 9/4=2.25
    ("trajectory", "per_turn", 4.5),
    ("turn", "per_turn", 4.5),
    # (1+2+3+4+5)/5 tokens
    ("trajectory", "token_mean", 3.0),
    ("turn", "token_mean", 3.0),
    # per sequence mean then mean: trajectory samples (6/3 + 9/2)/2; turn samples (1.5 + 3 + 4.5)/3
    ("trajectory", "seq_mean_token_mean", 3.25),
    ("turn", "seq_mean_token_mean", 3.0),
    # WebGym: sum over tokens, mean over trajectories (6 + 9)/2
    ("trajectory", "traj_sum", 7.5),
    ("turn", "traj_sum", 7.5),
])
def test_normalisation_modes(per, norm, expected):
    samples = build_samples(_group(), per=per, norm=norm)
    assert _loss(samples) == pytest.approx(expected, rel=1e-6)


def test_modes_differ_on_same_data():
    vals = {m: _loss(build_samples(_group(), per="trajectory", norm=m))
            for m in ("webagent_r1", "per_turn", "token_mean", "seq_mean_token_mean", "traj_sum")}
    assert len(set(round(v, 6) for v in vals.values())) == 5


@pytest.mark.parametrize("norm,expected", [
    # token_mean: responses 1+2 (turn 0) + 3 (turn 1) + 4+5 (b) = 15 over 5 response tokens; contexts
    # (5 6 -> 6; 5 6 7 8 9 -> 6 7 8 9; 5 6 -> 6) add w * (NLL 0 except 7 and 8: 1 + 2) once each
    ("token_mean", (15 + 0.5 * 3) / 5),
    # seq_mean_token_mean: a context token weighs as much as its sample's response tokens
    ("seq_mean_token_mean", (1.5 + (3 + 0.5 * 3) + 4.5) / 3),
])
def test_context_loss_trains_prompt_tokens_at_a_relative_weight(norm, expected):
    samples = [with_context_loss(s, 0.5) for s in build_samples(_group(), per="turn", norm=norm)]
    assert _loss(samples) == pytest.approx(expected, rel=1e-6)
    assert samples[1].loss_mask.tolist() == [0, 1, 1, 1, 1, 1]  # all but the first token
    assert samples[1].advantages.tolist() == [0.0, 0.5, 0.5, 0.5, 0.5, 1.0]
    assert with_context_loss(samples[0], 0.0) is samples[0]
    with pytest.raises(ValueError, match="negative"):
        with_context_loss(samples[0], -1.0)


def test_trajectory_sample_layout():
    (s,) = build_samples([_group()[0]], per="trajectory", norm="token_mean")
    # prompt 5 6 | response 7 8 | new prompt tokens 9 | response 10
    assert s.tokens.tolist() == [5, 6, 7, 8, 9, 10]
    assert s.loss_mask.tolist() == [0, 0, 1, 1, 0, 1]


def test_compressed_history_needs_history_ids():
    a = Trajectory("t", [Turn([5, 6], [7, 8], history_ids=[5, 6]),
                         Turn([5, 99, 7, 8, 9], [10])])  # turn 1 saw a compressed first observation
    with pytest.raises(ValueError, match="history_ids"):
        build_samples([a], per="trajectory")
    a.turns[0].history_ids = [5, 99]  # the compressed form the agent kept
    (s,) = build_samples([a], per="trajectory")
    assert s.tokens.tolist() == [5, 99, 7, 8, 9, 10]


# ---- masked trajectories (env_error / judge_error): they do not exist for the update ------------------
# OpenWebRL: "samples [...] marked for removal from optimization [...] have their loss mask zeroed". So a
# masked trajectory is not counted in G_i and the M-GRPO denominator is exactly the number of groups.
# Batch: group g = A, B (as above) + C (env_error, tokens with NLL 100 that must not count), group h = D
# (one turn, token 10 -> NLL 3).


def _masked_batch():
    from jaxwebrl.train.advantages import mask_failed

    a, b = _group()
    c = Trajectory("t", [Turn([5, 6], [13, 13, 13])], group_id="g", termination="env_error")
    d = Trajectory("u", [Turn([5, 6], [10])], group_id="h")
    return mask_failed([a, b, c, d])


@pytest.mark.parametrize("per,norm,expected,denominator", [
    # G_g = 2 (C absent), G_h = 1. webagent_r1: g as above 3.375; D 3/(1*1*1) = 3; 2 groups
    ("trajectory", "webagent_r1", (3.375 + 3) / 2, 2.0),
    ("turn", "webagent_r1", (3.375 + 3) / 2, 2.0),
    # per_turn: g 4.5, D 3; 2 groups (with C counted: G_g = 3 -> (3 + 3) / (2/3 + 1) = 3.6, denominator 1.67)
    ("trajectory", "per_turn", (4.5 + 3) / 2, 2.0),
    ("turn", "per_turn", (4.5 + 3) / 2, 2.0),
    # token_mean: (1+2+3+4+5+3) / 6 trained tokens
    ("trajectory", "token_mean", 18 / 6, 6.0),
    ("turn", "token_mean", 18 / 6, 6.0),
    # seq_mean_token_mean: trajectory samples A 2, B 4.5, D 3; turn samples 1.5, 3, 4.5, 3
    ("trajectory", "seq_mean_token_mean", (2 + 4.5 + 3) / 3, 3.0),
    ("turn", "seq_mean_token_mean", (1.5 + 3 + 4.5 + 3) / 4, 4.0),
    # traj_sum: (6 + 9 + 3) over 3 existing trajectories
    ("trajectory", "traj_sum", 18 / 3, 3.0),
    ("turn", "traj_sum", 18 / 3, 3.0),
])
def test_masked_trajectory_is_absent_from_normalisation(per, norm, expected, denominator):
    from jaxwebrl.data.samples import total_denominator

    batch = _masked_batch()
    assert batch[2].num_trained_turns == 0  # mask_failed did mask C
    samples = build_samples(batch, per=per, norm=norm)
    assert samples and all(13 not in s.tokens.tolist() for s in samples)
    assert total_denominator(samples) == pytest.approx(denominator, rel=1e-6)
    assert _loss(samples) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("per", ["trajectory", "turn"])
@pytest.mark.parametrize("norm", ["webagent_r1", "per_turn"])
def test_mgrpo_denominator_is_the_number_of_groups_with_a_masked_member(per, norm):
    """The case of issue 26: three groups of four, one trajectory masked -> exactly 3 (was 2.75)."""
    from jaxwebrl.data.samples import total_denominator
    from jaxwebrl.train.advantages import mask_failed

    turns = lambda n: [Turn([5, 6], [7, 8]), Turn([5, 6, 7, 8, 9], [10])][:n]  # noqa: E731
    trajs = [Trajectory(f"t{g}", turns(1 + i % 2), group_id=f"g{g}", reward=float(i % 2),
                        termination="judge_error" if (g, i) == (1, 3) else "done")
             for g in range(3) for i in range(4)]
    samples = build_samples(mask_failed(trajs), per=per, norm=norm)
    assert len({s.group_id for s in samples}) == 3
    assert total_denominator(samples) == pytest.approx(3.0, rel=1e-6)
