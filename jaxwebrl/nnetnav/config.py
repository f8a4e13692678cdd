"""The `nnetnav` config section: exploration, pruning, relabeling and politeness settings (paper values as defaults).

Paper (NNetNav §3-4, Appendix): prune every 4 steps up to t_max = 40 (MiniWoB++: 20), ORM pass = score >= 4,
best-of-K with K = 3 (optional), live sites at most 10 parallel instances and 0.5 s between actions.
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.fields import FieldError, at_least
from jaxwebrl.judges.config import JudgeConfig

SUMMARIZERS = ("model", "page_diff")


def _seeds(spec: str) -> list[int]:
    """'0:80' -> 0..79; '1,5,9' -> [1, 5, 9]."""
    spec = spec.strip()
    if ":" in spec:
        lo, hi = spec.split(":", 1)
        return list(range(int(lo), int(hi)))
    return [int(s) for s in spec.split(",") if s.strip()]


@dataclasses.dataclass(frozen=True)
class NNetNavConfig:
    personas_file: str = "envs/personas/miniwob.txt"  # one persona per line, '#' comments; edit it freely
    tasks: str = ""  # comma-separated task ids to explore ('' = every task of the suite's train split)
    seeds: str = "0:80"  # per task: '0:80' (the paper's 80 episodes per MiniWoB++ interface) or '1,5,9'
    max_steps: int = 40  # t_max (MiniWoB++: 20)
    prune_every: int = 4  # label + ORM at t in {4, 8, ..., max_steps}
    label_at_end: bool = True  # also label the whole episode when it ends off the schedule (MiniWoB++ tasks end early)
    pass_score: int = 4  # ORM accepts a prefix with score >= pass_score (1..5)
    temperature: float = 1.0  # explorer sampling temperature
    explore_prompt: bool = True  # the explorer's system prompt (Listing 2); False keeps the agent's own (a small
    # policy trained from scratch on a short system prompt), the persona still being its task line
    show_summaries: bool = True  # the explorer sees the state-change summaries so far (Listing 2's "Trajectory")
    concurrency: int = 4  # exploration episodes at once (further bounded per origin)
    max_instances_per_origin: int = 10  # politeness: browser instances on one origin at once
    min_action_interval_s: float = 0.5  # politeness: minimum time between two actions of one instance
    relabel_temperature: float = 0.0  # the agent policy re-writing each step (0 = greedy)
    best_of_k: int = 1  # K (paper's optional BofK: 3): K-1 extra agent episodes per instruction, ORM picks the best
    judge_uses_policy: bool = True  # one model for everything (the paper); False: `judge` describes the judge model
    # the judge model: the summariser, labeler and ORM (kind 'nnetnav_orm', the paper's 1..5 prompt), or the ORM
    # alone when it is the verifier trained here (kind 'verifier': SUCCESS accepts the prefix; the summariser and
    # labeler then need `summarizer='page_diff'` and `labeler_path`)
    judge: JudgeConfig = dataclasses.field(default_factory=lambda: JudgeConfig(kind="nnetnav_orm", engine="jax"))
    summarizer: str = "model"  # 'model': the judge model writes Delta(o, a, o') (the paper); 'page_diff': a rule
    labeler_path: str = ""  # a labeler trained here (HF dir, in-process JaxEngine; configs/labeler_local.py); '' = the judge model
    relabel_actions: str = "policy"  # 'policy': the agent re-writes each step (the paper); 'explored': keep the explored action
    append_stop: bool = True  # relabeling appends a final stop [answer] turn (MiniWoB++ pages end episodes themselves)
    judge_timeout_s: float = 120.0
    judge_max_new_tokens: int = 256
    output_dir: str = ""  # '' = <workdir>/nnetnav

    def __post_init__(self) -> None:
        at_least("max_steps", self.max_steps, 1)
        at_least("prune_every", self.prune_every, 1)
        at_least("concurrency", self.concurrency, 1)
        at_least("max_instances_per_origin", self.max_instances_per_origin, 1)
        at_least("best_of_k", self.best_of_k, 1)
        if not 1 <= self.pass_score <= 5:
            raise FieldError("pass_score", f"{self.pass_score} is outside the ORM's 1..5", "use 4 (the paper)")
        if self.min_action_interval_s < 0:
            raise FieldError("min_action_interval_s", f"{self.min_action_interval_s} < 0", "use >= 0 seconds (paper 0.5)")
        if self.temperature < 0 or self.relabel_temperature < 0:
            raise FieldError("temperature", "a temperature is negative", "use temperature, relabel_temperature >= 0")
        if self.judge_timeout_s <= 0:
            raise FieldError("judge_timeout_s", f"{self.judge_timeout_s} <= 0", "use > 0 seconds")
        try:
            self.seed_list()
        except ValueError as exc:
            raise FieldError("seeds", f"{self.seeds!r} does not parse", "write 'lo:hi' or a comma list of integers") from exc
        if not self.seed_list():
            raise FieldError("seeds", f"{self.seeds!r} names no seed", "name at least one, e.g. '0:80'")
        if self.summarizer not in SUMMARIZERS:
            raise FieldError("summarizer", f"{self.summarizer!r} is not one of {SUMMARIZERS}",
                             "use 'model' (the judge model writes the summaries) or 'page_diff' (a rule)")
        if self.relabel_actions not in ("policy", "explored"):
            raise FieldError("relabel_actions", f"{self.relabel_actions!r} is not 'policy' or 'explored'",
                             "use 'policy' (the paper: the agent re-writes each step) or 'explored'")
        if not self.judge_uses_policy:
            self.judge.validate()
        if self.judge.kind not in ("nnetnav_orm", "verifier"):
            raise FieldError("judge.kind", f"{self.judge.kind!r} cannot score NNetNav prefixes",
                             "use 'nnetnav_orm' (the paper's ORM prompt) or 'verifier' (the judge trained here)")
        if self.judge.kind == "verifier" and (self.judge_uses_policy or self.summarizer != "page_diff" or not self.labeler_path):
            raise FieldError("judge.kind", "'verifier' is an ORM only: it writes no summaries or instructions",
                             "set judge_uses_policy=False with judge.model_path, summarizer='page_diff' and "
                             "labeler_path (configs/nnetnav_trained_judges.py)")

    def schedule(self) -> tuple[int, ...]:
        """The pruning steps {k, 2k, ..., <= max_steps}."""
        return tuple(range(self.prune_every, self.max_steps + 1, self.prune_every))

    def seed_list(self) -> list[int]:
        return _seeds(self.seeds)

    def task_list(self) -> list[str]:
        return [t.strip() for t in self.tasks.split(",") if t.strip()]
