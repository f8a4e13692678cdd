"""Hosts agree on the shape of a round before any collective step, so no host waits in a step another skips.

In multi-host online RL each host packs its own rollouts: one host may produce 3 batches of 4,096 tokens,
another 1 of 16,384, or none. Every train step (and every old-logprob scoring pass) is a collective over
all hosts, so each host must run the same number of steps on arrays of the same shape. Before a round the
hosts exchange one small vector (one allgather) and adopt the largest sequence length and batch count;
a host pads its batches in length with padding tokens (segment 0) and adds batches of empty rows
(`data.pipeline.empty_rows`: loss mask, weight and denominator 0), which change no gradient and no
normaliser. Padding a batch packed at length L to a longer length keeps it exact (the extra positions
are padding), so one exchange suffices; the cost is that hosts with short rollouts compute over the
longest host's length.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from jaxwebrl.data.pipeline import BATCH_FIELDS, Batch, empty_rows


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """What every host runs this round: `num_batches` batches of [rows, seq_len]."""

    seq_len: int
    num_batches: int
    recompute_old_logprobs: bool  # some host lacks the sampler's logprobs: every host scores (collectively)


def gather_ints(values: Sequence[int]) -> np.ndarray:
    """[process_count, len(values)]: every host's vector, on every host (one allgather; no-op on one host)."""
    local = np.asarray(values, np.int64)
    if jax.process_count() == 1:
        return local[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), len(local))


def agree_round(seq_len: int, num_batches: int, has_old_logprobs: bool) -> RoundPlan:
    """The round every host runs: the longest length, the most batches, and scoring if any host needs it."""
    table = gather_ints([seq_len, num_batches, 0 if has_old_logprobs else 1])
    return RoundPlan(int(table[:, 0].max()), int(table[:, 1].max()), bool(table[:, 2].max()))


def conform(batches: Sequence[Batch], plan: RoundPlan, rows: int) -> list[Batch]:
    """This host's batches padded to `plan.seq_len` and topped up with empty batches to `plan.num_batches`."""
    if len(batches) > plan.num_batches:
        raise ValueError(f"{len(batches)} local batches but the hosts agreed on {plan.num_batches}: "
                         "agree_round must see this host's count")
    out = []
    for b in batches:
        T = b["tokens"].shape[1]
        if T > plan.seq_len:
            raise ValueError(f"a local batch of length {T} is longer than the agreed {plan.seq_len}")
        out.append({k: np.pad(np.asarray(b[k]), ((0, 0), (0, plan.seq_len - T))) for k in BATCH_FIELDS})
    out += [empty_rows(rows, plan.seq_len) for _ in range(plan.num_batches - len(out))]
    return out
