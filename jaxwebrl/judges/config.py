"""JudgeConfig / RewardConfig and `make_judge`: the one place a config picks a judge, its model and engine.

Engines: "jax" (in-process JaxEngine on `model_path`, the judge's own params, independent of the policy's),
"sglang" (an SGLang server at `url`, token in / token out, prompts rendered with `model_path`'s tokenizer),
"openai" (any OpenAI-compatible /v1/chat/completions at `url`; the server renders the chat template).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxwebrl.judges.backends import ChatBackend, EngineBackend, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import TaskSpecLookup
from jaxwebrl.judges.reward import REWARD_SOURCES

JUDGE_KINDS = ("openwebrl", "webgym_rubric", "nnetnav_orm", "nnetnav_labeler", "browseragent")
JUDGE_ENGINES = ("jax", "sglang", "openai")


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
    kind: str = "openwebrl"
    engine: str = "openai"
    model_path: str = ""  # HF checkpoint dir: the jax engine's weights; the tokenizer that renders prompts
    url: str = ""  # sglang / openai server
    urls: tuple[str, ...] = ()  # browseragent: one server per voting judge (the paper: 3)
    model_name: str = ""  # openai: the served model's name ('' = the server's first /v1/models entry)
    api_key_env: str = "OPENAI_API_KEY"  # openai: environment variable holding the key (local servers: unset)
    system_prompt: str = ""  # '' = the paper's prompt (openwebrl)
    action_space: str = ""  # '' = the paper's (openwebrl: openwebrl; webgym, browseragent: webarena; nnetnav: bid)
    concurrency: int = 8  # model calls in flight per judge
    queue_concurrency: int = 16  # episodes judged at once (JudgeQueue)
    timeout_s: float = 120.0  # per call (OpenWebRL Table 7)
    retries: int = 1
    max_new_tokens: int = 512
    temperature: float = 0.0
    pass_score: int = 4  # nnetnav_orm
    mode: str = "em_or_majority"  # browseragent
    jax_num_slots: int = 4
    jax_max_len: int = 4096

    def validate(self) -> None:
        if self.kind not in JUDGE_KINDS:
            raise ValueError(f"judge.kind={self.kind!r}: use one of {JUDGE_KINDS}")
        if self.engine not in JUDGE_ENGINES:
            raise ValueError(f"judge.engine={self.engine!r}: use one of {JUDGE_ENGINES}")
        if self.engine == "jax" and not self.model_path:
            raise ValueError("judge.engine='jax' needs judge.model_path (a HF checkpoint directory of the judge)")
        if self.engine == "sglang" and not self.model_path:
            raise ValueError("judge.engine='sglang' needs judge.model_path for the tokenizer that renders prompts")
        if self.engine in ("sglang", "openai") and not (self.url or self.urls):
            raise ValueError(f"judge.engine={self.engine!r} needs judge.url (e.g. http://127.0.0.1:30000)")
        self.options()  # validates the call policy

    def options(self) -> JudgeOptions:
        return JudgeOptions(timeout_s=self.timeout_s, retries=self.retries, concurrency=self.concurrency,
                            max_new_tokens=self.max_new_tokens, temperature=self.temperature)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    source: str = "rule"  # rule | judge | rule_or_judge
    judge: JudgeConfig = dataclasses.field(default_factory=JudgeConfig)

    def validate(self) -> None:
        if self.source not in REWARD_SOURCES:
            raise ValueError(f"reward.source={self.source!r}: use one of {REWARD_SOURCES}")
        if self.source != "rule":
            self.judge.validate()


def make_backend(cfg: JudgeConfig, url: str | None = None, *, tokenizer: Any | None = None,
                 mesh: Any | None = None) -> JudgeBackend:
    """The backend `cfg.engine` names (a fresh engine / client owned by the backend). `mesh`: where an in-process
    judge's params live (its own mesh or a sub-mesh, apart from the policy's); None = one device."""
    from jaxwebrl.models import load_tokenizer

    if tokenizer is None and cfg.model_path:
        tokenizer = load_tokenizer(cfg.model_path)
    if cfg.engine == "jax":
        from jaxwebrl.engines.jax_engine import JaxEngine

        engine = JaxEngine.from_checkpoint(cfg.model_path, mesh=mesh, tokenizer=tokenizer, num_slots=cfg.jax_num_slots,
                                           max_len=cfg.jax_max_len, name="judge-jax")
        return EngineBackend(engine, tokenizer)
    if cfg.engine == "sglang":
        from jaxwebrl.engines.sglang_engine import SGLangEngine

        return EngineBackend(SGLangEngine(url or cfg.url, request_timeout=cfg.timeout_s, retries=cfg.retries), tokenizer)
    from jaxwebrl.engines.openai_engine import OpenAIChatEngine

    client = OpenAIChatEngine(url or cfg.url, model=cfg.model_name or None, api_key_env=cfg.api_key_env or None,
                              request_timeout=cfg.timeout_s, retries=cfg.retries)
    return ChatBackend(client, tokenizer=tokenizer)


def make_judge(cfg: JudgeConfig, *, backend: JudgeBackend | None = None, task_specs: TaskSpecLookup | None = None,
               mesh: Any | None = None) -> Any:
    """The judge `cfg.kind` names, on `backend` or on the one `cfg` describes."""
    from jaxwebrl.judges.browseragent import BrowserAgentJudge
    from jaxwebrl.judges.nnetnav import NNetNavORM, TrajectoryLabeler
    from jaxwebrl.judges.openwebrl import OpenWebRLJudge
    from jaxwebrl.judges.webgym import WebGymRubricJudge

    cfg.validate()
    opts = cfg.options()
    space = {"action_space": cfg.action_space} if cfg.action_space else {}
    if cfg.kind == "browseragent":
        if cfg.mode == "exact_match":
            backends: list[JudgeBackend] = []
        elif backend is not None:
            backends = [backend]
        else:
            backends = [make_backend(cfg, u, mesh=mesh) for u in (cfg.urls or (cfg.url,))]
        return BrowserAgentJudge(backends, opts, mode=cfg.mode, task_specs=task_specs, **space)  # type: ignore[arg-type]
    backend = backend or make_backend(cfg, mesh=mesh)
    if cfg.kind == "openwebrl":
        return OpenWebRLJudge(backend, opts, system_prompt=cfg.system_prompt or None, task_specs=task_specs, **space)
    if cfg.kind == "webgym_rubric":
        return WebGymRubricJudge(backend, opts, task_specs=task_specs, **space)
    if cfg.kind == "nnetnav_orm":
        return NNetNavORM(backend, opts, pass_score=cfg.pass_score, task_specs=task_specs, **space)
    return TrajectoryLabeler(backend, opts, task_specs=task_specs, **space)
