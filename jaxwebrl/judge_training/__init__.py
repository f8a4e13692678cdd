"""Judges trained here and checked against the rule evaluator: `verifier` (the generative verifier judge,
from a main job's BC policy and rollouts), `labeler` (NNetNav's trajectory labeler, on the summaries the
pipeline writes), `judge_loop` (a judge's agreement with the rule on a run's rollouts, over iterations)."""
