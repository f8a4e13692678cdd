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

The online loop needs two more things per host: its own rollout engine holds a full host-local copy of the
policy (`host_local`: an allgather every host makes at the same point, at start and after each agreed
update), its own stream of tasks and seeds (`host_seed`), so hosts do not play the same episodes, and its
own record files in the shared workdir (`host_path`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

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


def host_local(tree: Any) -> Any:
    """`tree` with every leaf whole on this host (numpy), for a rollout engine each host runs on its own.

    On one process the tree is returned as it is. With several, leaves sharded across hosts are gathered: a
    collective, so every host must call this at the same point (after an update all hosts agreed to run)."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    def whole(a: Any) -> Any:
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(a, tiled=True))
        return np.asarray(a)

    return jax.tree.map(whole, tree)


def host_seed(seed: int) -> int:
    """A seed of this host's own (the run's `seed` on one process), so hosts draw different tasks and seeds."""
    if jax.process_count() == 1:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), jax.process_index()]).generate_state(1)[0])


def host_path(path: str | os.PathLike[str]) -> str:
    """`path` itself on one process; with several, this host's own file beside it (`history.host1.jsonl`), so
    hosts sharing a workdir never append to one record file."""
    path = os.fspath(path)
    if jax.process_count() == 1:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.host{jax.process_index()}{ext}"
