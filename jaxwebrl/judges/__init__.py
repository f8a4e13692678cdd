"""Judges: models that score finished episodes, behind the Engine protocol (in-process JaxEngine, SGLang) or
an OpenAI-compatible chat URL. One judge per paper: OpenWebRL's trajectory judge, WebGym's rubric judge,
NNetNav's ORM / labeler / summariser, BrowserAgent's exact match + majority. See each module's doc."""

from jaxwebrl.judges.backends import (
    BackendError, CallRunner, ChatBackend, ChatMessage, Completion, EngineBackend, JudgeBackend, JudgeOptions,
    render_prompt_ids,
)
from jaxwebrl.judges.base import JUDGE_ERROR, Judge, JudgeCall, JudgeInput, JudgeStep, Verdict, judge_error
from jaxwebrl.judges.browseragent import BrowserAgentJudge
from jaxwebrl.judges.config import (
    JUDGE_ENGINES, JUDGE_KINDS, REWARD_JUDGE_KINDS, JudgeConfig, make_backend, make_judge,
)
from jaxwebrl.judges.nnetnav import NNetNavORM, StateChangeSummarizer, TrajectoryLabeler
from jaxwebrl.judges.openwebrl import OpenWebRLJudge
from jaxwebrl.judges.queue import JudgeQueue, rollout_and_judge
from jaxwebrl.judges.reward import (
    JUDGED_SOURCES, JUDGED_SUCCESS_KEY, REWARD_SOURCES, RULE_EVALUATOR_KEY, RewardDecision, apply_decision,
    has_rule_evaluator, needs_judge, record_verdict, reward_from_verdict,
)
from jaxwebrl.judges.scoring import EpisodeScorer, make_scorer
from jaxwebrl.judges.verifier import VerifierJudge
from jaxwebrl.judges.synthesis import ModelTaskWriter, decomposition_subsets, synthesize_tasks, write_task_file
from jaxwebrl.judges.webgym import WebGymRubricJudge, difficulty, difficulty_level, reference_match

__all__ = [
    "BackendError", "CallRunner", "ChatBackend", "ChatMessage", "Completion", "EngineBackend", "JudgeBackend",
    "JudgeOptions", "render_prompt_ids", "JUDGE_ERROR", "Judge", "JudgeCall", "JudgeInput", "JudgeStep", "Verdict",
    "judge_error", "BrowserAgentJudge", "JUDGE_ENGINES", "JUDGE_KINDS", "REWARD_JUDGE_KINDS", "JudgeConfig", "make_backend",
    "make_judge", "NNetNavORM", "StateChangeSummarizer", "TrajectoryLabeler", "OpenWebRLJudge", "JudgeQueue",
    "rollout_and_judge", "JUDGED_SOURCES", "JUDGED_SUCCESS_KEY", "REWARD_SOURCES", "RULE_EVALUATOR_KEY", "RewardDecision",
    "apply_decision", "has_rule_evaluator", "needs_judge", "record_verdict", "reward_from_verdict", "EpisodeScorer",
    "make_scorer", "VerifierJudge",
    "ModelTaskWriter", "decomposition_subsets", "synthesize_tasks", "write_task_file", "WebGymRubricJudge",
    "difficulty", "difficulty_level", "reference_match",
]
