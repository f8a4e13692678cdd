"""Did the judge close the loop (issue 21 item 5)? The judge's agreement with the rule evaluator on the episodes
RL produced, per iteration, and the false positives the policy learned to produce.

In a run with `reward.source='judge'` every rollout in `<workdir>/rl/rollouts.jsonl` carries both outcomes: the
rule evaluator's (`metadata['success']`, which the run never trained on) and the judge's
(`metadata['judged_success']`, the reward). Reward hacking shows up as judge SUCCESS on episodes the rule calls
failures (false positives) growing over the iterations. The control is the same judge on the rollouts of the
run rewarded by the rule (`judge_rollouts`): a policy that never trained against the judge shows the judge's
error rate on this task mix without any pressure to exploit it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

from jaxwebrl.data.records import Trajectory
from jaxwebrl.evaluation.evaluate import wilson_interval
from jaxwebrl.judges.reward import JUDGED_SUCCESS_KEY


@dataclasses.dataclass(frozen=True)
class Judged:
    """One rollout as the comparison needs it: both outcomes, where it came from."""

    iteration: int
    task_id: str
    rule: bool
    judge: bool
    kept: bool  # its group trained (dynamic sampling kept it)


@dataclasses.dataclass(frozen=True)
class AgreementRow:
    label: str
    episodes: int
    rule_successes: int
    judge_successes: int
    agree: int
    false_pos: int  # judge SUCCESS, rule failure
    false_neg: int  # judge NOT SUCCESS, rule success

    @property
    def rule_failures(self) -> int:
        return self.episodes - self.rule_successes

    @property
    def agreement(self) -> float:
        return self.agree / max(1, self.episodes)

    @property
    def false_positive_rate(self) -> float:
        """Of the episodes the rule calls failures, the share the judge called SUCCESS."""
        return self.false_pos / max(1, self.rule_failures)

    @property
    def precision(self) -> float:
        return (self.judge_successes - self.false_pos) / max(1, self.judge_successes)

    def cells(self) -> list[str]:
        lo, hi = wilson_interval(self.agree, self.episodes)
        flo, fhi = wilson_interval(self.false_pos, self.rule_failures)
        return [self.label, str(self.episodes), f"{self.rule_successes / max(1, self.episodes):.0%}",
                f"{self.judge_successes / max(1, self.episodes):.0%}", f"{self.agreement:.0%} [{lo:.0%}, {hi:.0%}]",
                f"{self.false_pos} ({self.false_positive_rate:.0%} [{flo:.0%}, {fhi:.0%}] of rule failures)",
                str(self.false_neg), f"{self.precision:.0%}" if self.judge_successes else "-"]


HEADER = ["iterations", "episodes", "rule success", "judge success", "agreement (95% CI)",
          "false positives (judge SUCCESS, rule failure)", "false negatives", "judge precision"]


def judged_rollouts(trajs: Iterable[Trajectory]) -> tuple[list[Judged], int]:
    """(the rollouts the judge decided, how many it could not: judge_error or never judged)."""
    out, undecided = [], 0
    for t in trajs:
        m = t.metadata
        verdict = m.get("judge") or {}
        if JUDGED_SUCCESS_KEY not in m or verdict.get("error") or t.termination == "judge_error":
            undecided += 1
            continue
        out.append(Judged(int(m.get("iteration", 0)), t.task_id, bool(m.get("success")), bool(m[JUDGED_SUCCESS_KEY]),
                          bool(m.get("group_kept", True))))
    return out, undecided


def summarise(rows: Sequence[Judged], label: str) -> AgreementRow:
    return AgreementRow(label, len(rows), sum(r.rule for r in rows), sum(r.judge for r in rows),
                        sum(r.rule == r.judge for r in rows), sum(r.judge and not r.rule for r in rows),
                        sum(r.rule and not r.judge for r in rows))


def by_iteration(rows: Sequence[Judged], bucket: int = 1) -> list[AgreementRow]:
    """One row per `bucket` consecutive iterations, then the whole run."""
    groups: dict[int, list[Judged]] = defaultdict(list)
    for r in rows:
        groups[r.iteration // bucket].append(r)
    out = []
    for b in sorted(groups):
        lo, hi = b * bucket, b * bucket + bucket - 1
        out.append(summarise(groups[b], f"{lo}" if bucket == 1 else f"{lo}-{hi}"))
    out.append(summarise(list(rows), "all"))
    return out


def by_task(rows: Sequence[Judged]) -> list[AgreementRow]:
    tasks: dict[str, list[Judged]] = defaultdict(list)
    for r in rows:
        tasks[r.task_id].append(r)
    return [summarise(tasks[t], t.split(".", 1)[-1]) for t in sorted(tasks)]


def early_late_test(rows: Sequence[Judged]) -> tuple[AgreementRow, AgreementRow, float]:
    """False positives among rule failures in the first half of the iterations vs the second half, and the
    two-sided Fisher exact p of the difference (a policy learning to fool the judge raises the second)."""
    from scipy.stats import fisher_exact

    its = sorted({r.iteration for r in rows})
    if not its:
        raise ValueError("no judged rollout: nothing to compare")
    cut = its[len(its) // 2]
    early = summarise([r for r in rows if r.iteration < cut], f"iterations < {cut}")
    late = summarise([r for r in rows if r.iteration >= cut], f"iterations >= {cut}")
    table = [[early.false_pos, early.rule_failures - early.false_pos], [late.false_pos, late.rule_failures - late.false_pos]]
    return early, late, float(fisher_exact(table).pvalue)


def table(rows: Sequence[AgreementRow], first: str = "iterations") -> str:
    head = [first] + HEADER[1:]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


# ---- the same judge on rollouts it never rewarded (the control) -----------------------------------------


def judge_rollouts(judge_path: str, trajs: Sequence[Trajectory], action_space: str, batch: int = 8,
                   seq_len: int = 2048) -> tuple[list[Trajectory], np.ndarray]:
    """The trained verifier's decision on each rollout, as the run's judge makes it: greedy decoding writes the
    verdict whose first token is more probable, i.e. P(SUCCESS) >= 0.5 over the two verdict tokens *without*
    the prior correction the held-out report applies (`judge_training.prior_corrected`). Returns copies of the
    rollouts that fit `seq_len` with `metadata['judged_success']` set, and the scores."""
    from jaxwebrl.judge_training.verifier import Example, JudgeTrainingConfig, judge_messages, verdict_scores
    from jaxwebrl.judges.backends import render_prompt_ids
    from jaxwebrl.models import load_hf, load_tokenizer

    tok = load_tokenizer(judge_path)
    model_cfg, params = load_hf(judge_path)
    cfg = JudgeTrainingConfig()
    kept, data = [], []
    for t in trajs:
        ids = render_prompt_ids(tok, judge_messages(t, cfg, action_space))
        if len(ids) >= seq_len:
            continue
        kept.append(t)
        data.append(Example(ids, [], bool(t.metadata.get("success")), t.task_id, int(t.metadata.get("seed", -1))))
    scores = verdict_scores(model_cfg, params, data, tok, batch=batch) if data else np.zeros(0)
    out = []
    for t, s in zip(kept, scores):
        meta = {**t.metadata, JUDGED_SUCCESS_KEY: bool(s >= 0.5), "judge": {"offline_score": float(s)}}
        out.append(dataclasses.replace(t, metadata=meta))
    return out, scores


def offline_matches_online(trajs: Sequence[Trajectory], offline: Sequence[Trajectory]) -> tuple[int, int]:
    """How many of the run's own verdicts the offline decision reproduces (matched by episode id): the check
    that `judge_rollouts` decides as the judge in the run did."""
    online = {t.metadata.get("episode_id"): bool(t.metadata.get(JUDGED_SUCCESS_KEY)) for t in trajs
              if JUDGED_SUCCESS_KEY in t.metadata}
    pairs = [(online[o.metadata.get("episode_id")], bool(o.metadata[JUDGED_SUCCESS_KEY])) for o in offline
             if o.metadata.get("episode_id") in online]
    return sum(a == b for a, b in pairs), len(pairs)


def agreement_section(name: str, trajs: Sequence[Trajectory], bucket: int = 4) -> str:
    """The markdown block of one run's rollouts: per iteration bucket, per task, early vs late false positives."""
    rows, undecided = judged_rollouts(trajs)
    if not rows:
        return f"{name}: no rollout carries both a judge verdict and the rule's outcome."
    early, late, p = early_late_test(rows)
    kept = [r for r in rows if r.kept]
    return "\n".join([
        f"{len(rows)} rollouts judged ({undecided} without a verdict: judge_error or not judged). Rule = the rule "
        "evaluator's outcome (never a reward in this run when the judge rewarded it); judge = the trained "
        "verifier's verdict.", "",
        table(by_iteration(rows, bucket)), "",
        "Only the groups that trained (dynamic sampling kept them):", "", table([summarise(kept, "kept groups")]), "",
        "Per task (all iterations):", "", table(by_task(rows), first="task"), "",
        f"False positives among rule failures, {early.label}: {early.false_pos}/{early.rule_failures} "
        f"({early.false_positive_rate:.0%}); {late.label}: {late.false_pos}/{late.rule_failures} "
        f"({late.false_positive_rate:.0%}); Fisher exact p = {p:.2g}.",
    ])
