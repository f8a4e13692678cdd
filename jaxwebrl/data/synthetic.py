"""A synthetic web-agent data set tokenised with a real (tiny) tokenizer, so train.py runs out of the box.

Tasks are "click the element named X" on a one-line accessibility tree; the demonstration answers with
the right element id. `kind="trajectories"` writes groups of G rollouts with 0/1 rewards (the right or a
wrong id) for GRPO from records; response logprobs are left out (the trainer recomputes them).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxwebrl.data.records import Trajectory, Turn, write_jsonl

NAMES = ("Submit", "Search", "Login", "Next", "Home", "Enter")


def _encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def synthetic_trajectories(tokenizer: Any, n: int, kind: str = "sft", group_size: int = 4, seed: int = 0) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = []
    tasks = n if kind == "sft" else max(1, n // group_size)
    for i in range(tasks):
        ids = rng.choice(np.arange(1, 40), size=3, replace=False)
        names = rng.choice(NAMES, size=3, replace=False)
        target = int(rng.integers(0, 3))
        obs = " ".join(f'[{e}] button "{nm}"' for e, nm in zip(ids, names))
        prompt = f"task: click the {names[target]} button\n{obs}\n"
        tries = [target] if kind == "sft" else [int(rng.integers(0, 3)) for _ in range(group_size)]
        for j, pick in enumerate(tries):
            answer = f'<think> </think> <answer> click [{ids[pick]}] </answer>'
            turn = Turn(prompt_ids=_encode(tokenizer, prompt), response_ids=_encode(tokenizer, answer) + [eos],
                        observation=obs, action=f"click [{ids[pick]}]")
            out.append(Trajectory(task_id=f"demo{i}", group_id=f"demo{i}", turns=[turn],
                                  reward=float(pick == target), termination="done"))
    return out


def write_synthetic_jsonl(path: str | os.PathLike[str], tokenizer: Any, n: int, kind: str = "sft", seed: int = 0) -> str:
    write_jsonl(path, synthetic_trajectories(tokenizer, n, kind, seed=seed))
    return str(path)
