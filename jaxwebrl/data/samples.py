"""`Sample` = one training sequence, and the two ways the papers cut trajectories into samples.

- `per="trajectory"` (WebAgent-R1): one sequence per trajectory, the history in the (compressed) form the
  agent kept, every response trained in place. Earlier responses are scored on the compressed context, so
  the engine's logprobs (taken on the full context) are only an approximation there: the WebAgent-R1
  recipe recomputes old logprobs in the trainer (`train.old_logprobs="recompute"`).
- `per="turn"` (OpenWebRL, BrowserAgent, NNetNav, WebGym): one sequence per turn, the exact rollout
  context plus that turn's response.

Per-token arrays are aligned with `tokens`: `loss_mask[t] = 1` means token t is trained (it is predicted by
the logits at t-1). Normalisation is computed here, at construction time, into two per-token arrays so a
trajectory may be split over micro-batches, optimizer steps or packed rows and the loss stays exact:

  loss = sum_t norm_weight[t] * loss_mask[t] * l[t]  /  sum_t norm_denom[t]

| mode                  | norm_weight on turn j of trajectory i | sum of norm_denom                 |
|-----------------------|---------------------------------------|-----------------------------------|
| webagent_r1           | 1 / (G_i |tau_i| |a_ij|)              | number of groups                  |
| per_turn (OpenWebRL)  | 1 / (G_i |a_ij|)                      | number of groups                  |
| token_mean (DAPO)     | 1                                     | number of trained tokens          |
| seq_mean_token_mean   | 1 / (trained tokens of the sample)    | number of samples                 |
| traj_sum (WebGym)     | 1                                     | number of trajectories            |

G_i = trajectories of i's group in this batch that have a trained token; |tau_i| = turns of i with a trained token; |a_ij| = trained
tokens of turn j. A turn's share of the denominator is spread evenly over its trained tokens.

A trajectory with no trained token (mask 0 from `train.advantages.mask_failed`: judge timeout or
infrastructure failure) does not exist for the update, as in OpenWebRL ("removal from optimization"): it
makes no sample, is not counted in G_i, and (in `train.advantages`) does not enter its group's reward mean
and std. So "number of groups" above is exact: the groups with at least one trained trajectory.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from jaxwebrl.data.records import Trajectory, Turn, TurnImage

NORM_MODES = ("webagent_r1", "per_turn", "token_mean", "seq_mean_token_mean", "traj_sum")
SAMPLE_MODES = ("trajectory", "turn")
# Per-token features a Sample carries, with their dtypes (the pipeline packs exactly these).
FEATURES: dict[str, Any] = {
    "tokens": np.int32,
    "loss_mask": np.int32,
    "advantages": np.float32,
    "old_logprobs": np.float32,
    "norm_weight": np.float32,
    "norm_denom": np.float32,
}


@dataclass
class Sample:
    """One training sequence (unpadded). `advantages` is the GRPO advantage, or for the weighted-NLL family
    (SFT, RFT, REINFORCE, NNetNav) the per-token weight. `old_logprobs` are the engine's (0 where unknown;
    `has_old_logprobs` says whether all trained tokens have one). `segment_ids`/`positions` describe the
    sequence alone (all 1 / 0..L-1); packing renumbers them."""

    tokens: np.ndarray
    loss_mask: np.ndarray
    advantages: np.ndarray
    old_logprobs: np.ndarray
    norm_weight: np.ndarray
    norm_denom: np.ndarray
    has_old_logprobs: bool = False
    task_id: str = ""
    group_id: str = ""
    policy_version: int = 0
    images: list[TurnImage] | None = None  # the images in `tokens`, in order (vision-language turns)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        for name, dtype in FEATURES.items():
            arr = np.asarray(getattr(self, name), dtype=dtype)
            if arr.shape != (n,):
                raise ValueError(f"Sample.{name} has shape {arr.shape}, expected ({n},)")
            setattr(self, name, arr)
        if n and self.loss_mask[0]:
            raise ValueError("Sample.loss_mask[0] must be 0: the first token has no prediction")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def segment_ids(self) -> np.ndarray:
        return np.ones(len(self), np.int32)

    @property
    def positions(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int32)

    @property
    def num_trained(self) -> int:
        return int(self.loss_mask.sum())

    def features(self) -> dict[str, np.ndarray]:
        """The per-token arrays, as the Grain pipeline packs them."""
        return {k: getattr(self, k) for k in FEATURES}

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k).tolist() for k in FEATURES}
        d.update(has_old_logprobs=self.has_old_logprobs, task_id=self.task_id, group_id=self.group_id,
                 policy_version=self.policy_version)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        return cls(**d)

    def truncated(self, max_len: int) -> "Sample":
        """The first `max_len` tokens (the tail's loss terms and denominator shares are dropped)."""
        if len(self) <= max_len:
            return self
        return dataclasses.replace(self, **{k: getattr(self, k)[:max_len] for k in FEATURES})


# ---- normalisation ---------------------------------------------------------------------------------


def _turn_norm(mode: str, group_size: int, n_turns: int, n_tokens: int) -> tuple[float, float]:
    """(norm_weight per trained token, this turn's denominator share) for modes that are per turn."""
    G, T, A = float(group_size), float(n_turns), float(n_tokens)
    if mode == "webagent_r1":
        return 1.0 / (G * T * A), 1.0 / (G * T)
    if mode == "per_turn":
        return 1.0 / (G * A), 1.0 / (G * T)
    if mode == "token_mean":
        return 1.0, A
    if mode == "traj_sum":
        return 1.0, 1.0 / T
    raise ValueError(f"normalisation mode {mode!r} is unknown; use one of {NORM_MODES}")


def _spread(mask: np.ndarray, total: float) -> np.ndarray:
    n = mask.sum()
    return (mask * (total / n)).astype(np.float32) if n else np.zeros_like(mask, np.float32)


def _seq_mean_token_mean(s: Sample) -> Sample:
    n = s.num_trained
    w = s.loss_mask.astype(np.float32) / max(n, 1)
    return dataclasses.replace(s, norm_weight=w, norm_denom=_spread(s.loss_mask.astype(np.float32), 1.0))


# ---- construction ----------------------------------------------------------------------------------


def _turn_arrays(turn: Turn) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    ids = np.asarray(turn.response_ids, np.int32)
    mask = np.asarray(turn.mask, np.int32)
    lps = None if turn.response_logprobs is None else np.asarray(turn.response_logprobs, np.float32)
    return ids, mask, lps


def _history_ids(turn: Turn, packed_so_far: list[int], j: int) -> list[int]:
    """Tokens this turn adds before its response in the trajectory-level sequence (see records.Turn)."""
    if turn.history_ids is not None:
        return list(turn.history_ids)
    n = len(packed_so_far)
    if list(turn.prompt_ids[:n]) != packed_so_far:
        raise ValueError(
            f"turn {j}: prompt_ids do not extend the trajectory so far (the context was rewritten, e.g. "
            "compressed); set Turn.history_ids for the earlier turns, or build per-turn samples (per='turn')"
        )
    return list(turn.prompt_ids[n:])


def trajectory_sample(traj: Trajectory, norm: str, group_size: int = 1) -> Sample | None:
    """One packed sequence for the whole trajectory (WebAgent-R1); None when nothing is trained."""
    adv = 1.0 if traj.advantage is None else float(traj.advantage)
    n_turns = traj.num_trained_turns
    if n_turns == 0:
        return None
    if any(t.images for t in traj.turns):
        raise ValueError(f"task {traj.task_id}: turns with images train as per-turn samples (per='turn'), "
                         "each with the screenshots its context showed")
    toks: list[np.ndarray] = []
    masks, lps, ws, ds = [], [], [], []
    packed: list[int] = []
    have_lps = True
    for j, turn in enumerate(traj.turns):
        hist = np.asarray(_history_ids(turn, packed, j), np.int32)
        ids, mask, lp = _turn_arrays(turn)
        have_lps &= lp is not None or mask.sum() == 0
        zeros = np.zeros(len(hist), np.float32)
        toks += [hist, ids]
        masks += [np.zeros(len(hist), np.int32), mask]
        lps += [zeros, lp if lp is not None else np.zeros(len(ids), np.float32)]
        if norm == "seq_mean_token_mean" or mask.sum() == 0:
            w, d = np.zeros(len(ids), np.float32), np.zeros(len(ids), np.float32)
        else:
            wt, share = _turn_norm(norm, group_size, n_turns, int(mask.sum()))
            w, d = (mask * wt).astype(np.float32), _spread(mask.astype(np.float32), share)
        ws += [zeros, w]
        ds += [zeros, d]
        packed += hist.tolist() + ids.tolist()
    tokens = np.concatenate(toks)
    mask = np.concatenate(masks)
    s = Sample(
        tokens=tokens, loss_mask=mask, advantages=(mask * adv).astype(np.float32),
        old_logprobs=np.concatenate(lps), norm_weight=np.concatenate(ws), norm_denom=np.concatenate(ds),
        has_old_logprobs=have_lps, task_id=traj.task_id, group_id=traj.group_id,
        policy_version=traj.policy_version,
    )
    return _seq_mean_token_mean(s) if norm == "seq_mean_token_mean" else s


def turn_samples(traj: Trajectory, norm: str, group_size: int = 1) -> list[Sample]:
    """One sequence per turn with a trained token: the exact rollout context + the response (OpenWebRL)."""
    adv = 1.0 if traj.advantage is None else float(traj.advantage)
    n_turns = traj.num_trained_turns
    out = []
    for turn in traj.turns:
        ids, mask, lp = _turn_arrays(turn)
        if mask.sum() == 0:
            continue
        p = np.asarray(turn.prompt_ids, np.int32)
        if len(p) == 0:
            raise ValueError(f"task {traj.task_id}: a turn has empty prompt_ids; the first token is never trained")
        full_mask = np.concatenate([np.zeros(len(p), np.int32), mask])
        if norm == "seq_mean_token_mean":
            w = np.zeros(len(full_mask), np.float32)
            d = w
        else:
            wt, share = _turn_norm(norm, group_size, n_turns, int(mask.sum()))
            w = (full_mask * wt).astype(np.float32)
            d = _spread(full_mask.astype(np.float32), share)
        s = Sample(
            tokens=np.concatenate([p, ids]), loss_mask=full_mask, advantages=(full_mask * adv).astype(np.float32),
            old_logprobs=np.concatenate([np.zeros(len(p), np.float32), lp if lp is not None else np.zeros(len(ids), np.float32)]),
            norm_weight=w, norm_denom=d, has_old_logprobs=lp is not None, task_id=traj.task_id,
            group_id=traj.group_id, images=turn.images,
            policy_version=traj.policy_version if turn.policy_version is None else turn.policy_version,
        )
        out.append(_seq_mean_token_mean(s) if norm == "seq_mean_token_mean" else s)
    return out


def build_samples(
    trajectories: Sequence[Trajectory], per: str = "turn", norm: str = "token_mean", max_len: int | None = None,
) -> list[Sample]:
    """Samples for a batch of trajectories; group sizes G_i count this batch's trajectories with a trained
    token (a masked trajectory does not exist, see the module doc)."""
    if per not in SAMPLE_MODES:
        raise ValueError(f"per={per!r}: use one of {SAMPLE_MODES}")
    if norm not in NORM_MODES:
        raise ValueError(f"norm={norm!r}: use one of {NORM_MODES}")
    sizes = collections.Counter(t.group_id for t in trajectories if t.num_trained_turns > 0)
    out: list[Sample] = []
    for t in trajectories:
        if per == "trajectory":
            s = trajectory_sample(t, norm, sizes[t.group_id])
            made = [s] if s is not None else []
        else:
            made = turn_samples(t, norm, sizes[t.group_id])
        out += [m.truncated(max_len) if max_len else m for m in made]
    return out


def with_context_loss(sample: Sample, weight: float) -> Sample:
    """`sample` with next-token prediction also trained on its context (prompt) tokens, each weighted `weight`
    relative to a response token; the denominator stays the response's, so `weight` is a ratio.

    For behaviour cloning a model from scratch: a response has a handful of tokens against hundreds of page
    tokens, and modelling the page too gives the attention that must find the goal's element in it a dense
    signal. A weighted-NLL objective only (`advantages` are the per-token weights), not a policy gradient."""
    if weight < 0:
        raise ValueError(f"context loss weight {weight} is negative; use 0 (responses only) or a positive ratio")
    trained = sample.loss_mask == 1
    if not weight or not trained.any():
        return sample
    context = ~trained
    context[0] = False  # the first token has no prediction
    per_token = float(sample.norm_weight[trained].mean())  # the response tokens' normalisation weight
    return dataclasses.replace(
        sample, loss_mask=(trained | context).astype(np.int32),
        advantages=np.where(context, weight, sample.advantages).astype(np.float32),
        norm_weight=np.where(context, per_token, sample.norm_weight).astype(np.float32))


def total_denominator(samples: Iterable[Sample]) -> float:
    return float(sum(s.norm_denom.sum() for s in samples))
