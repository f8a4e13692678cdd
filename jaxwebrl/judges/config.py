"""JudgeConfig and `make_judge`: the one place a config picks a judge, its model and engine.

The run config's `reward` section (`jaxwebrl.recipes.config.RewardConfig`) holds one `JudgeConfig` as
`reward.judge`; this module checks each of its fields (a `FieldError` naming the field and the fix, which
the run config prefixes with `config.reward.judge.`), and `require_backend` checks what a judge that will
actually run needs (a url or a checkpoint), which only matters when `reward.source` calls a judge.

Engines: "jax" (in-process JaxEngine on `model_path`, the judge's own params, independent of the policy's),
"sglang" (an SGLang server at `url`, token in / token out, prompts rendered with `model_path`'s tokenizer),
"openai" (any OpenAI-compatible /v1/chat/completions at `url`; the server renders the chat template).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxwebrl.fields import FieldError, at_least, comma_list, one_of, positive
from jaxwebrl.judges.backends import ChatBackend, EngineBackend, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import TaskSpecLookup

JUDGE_KINDS = ("openwebrl", "webgym_rubric", "nnetnav_orm", "nnetnav_labeler", "browseragent", "verifier")
# the labeler scores nothing; verifier: the judge trained here (jaxwebrl.judge_training.verifier)
REWARD_JUDGE_KINDS = ("openwebrl", "webgym_rubric", "nnetnav_orm", "browseragent", "verifier")
JUDGE_ENGINES = ("jax", "sglang", "openai")
BROWSERAGENT_MODES = ("exact_match", "majority", "em_or_majority")


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
    kind: str = "openwebrl"
    engine: str = "openai"
    model_path: str = ""  # HF checkpoint dir: the jax engine's weights; the tokenizer that renders prompts
    url: str = ""  # sglang / openai server
    urls: str = ""  # browseragent: comma-separated servers, one per voting judge (the paper: 3)
    model_name: str = ""  # openai: the served model's name ('' = the server's first /v1/models entry)
    api_key_env: str = "OPENAI_API_KEY"  # openai: environment variable holding the key (local servers: unset)
    system_prompt: str = ""  # '' = the paper's prompt (openwebrl; verifier: the one it was trained with)
    action_space: str = ""  # '' = the paper's (openwebrl: openwebrl; webgym, browseragent: webarena; nnetnav, verifier: bid)
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
    # jax: the in-process engine's deterministic mode (verdicts independent of what else is judged at once);
    # rl.schedule='deterministic' turns it on
    deterministic: bool = False

    def __post_init__(self) -> None:
        one_of("kind", self.kind, JUDGE_KINDS)
        one_of("engine", self.engine, JUDGE_ENGINES)
        one_of("mode", self.mode, BROWSERAGENT_MODES)
        at_least("concurrency", self.concurrency, 1, "allow at least 1 judge call in flight")
        at_least("queue_concurrency", self.queue_concurrency, 1, "allow at least 1 episode judged at once")
        positive("timeout_s", self.timeout_s, "give each judge call a time limit in seconds, e.g. 120")
        at_least("retries", self.retries, 0, "use 0 (no retry) or more")
        at_least("max_new_tokens", self.max_new_tokens, 1)
        if self.temperature < 0:
            raise FieldError("temperature", f"{self.temperature} must be >= 0", "use 0 (greedy) or a positive value")
        if not 1 <= self.pass_score <= 5:
            raise FieldError("pass_score", f"{self.pass_score} is outside NNetNav's 1..5 scale", "use 1..5 (paper: 4)")
        at_least("jax_num_slots", self.jax_num_slots, 1)
        at_least("jax_max_len", self.jax_max_len, 16)
        if self.action_space:
            from jaxwebrl.browser.actions import ACTION_SPACES

            one_of("action_space", self.action_space, tuple(ACTION_SPACES))

    @property
    def url_list(self) -> list[str]:
        """The servers to call: `urls` when given (browseragent's voting judges), else `url`."""
        return comma_list(self.urls) or ([self.url] if self.url else [])

    def require_backend(self) -> None:
        """What a judge that will run needs besides valid fields: a checkpoint or a server to call."""
        if self.kind == "browseragent" and self.mode == "exact_match":
            return  # exact match calls no model
        if self.engine == "jax" and not self.model_path:
            raise FieldError("model_path", "is empty but engine='jax' runs the judge in this process",
                             "point it at the judge's HuggingFace checkpoint directory")
        if self.engine == "sglang" and not self.model_path:
            raise FieldError("model_path", "is empty but engine='sglang' renders prompts with the judge's tokenizer",
                             "point it at the judge's HuggingFace checkpoint directory (its tokenizer files)")
        if self.engine in ("sglang", "openai") and not self.url_list:
            raise FieldError("url", f"is empty but engine={self.engine!r} calls a server",
                             "set the judge server's address, e.g. http://127.0.0.1:30000")

    def validate(self) -> None:
        """Everything a judge built from this config needs (field checks ran at construction)."""
        self.require_backend()

    def options(self) -> JudgeOptions:
        return JudgeOptions(timeout_s=self.timeout_s, retries=self.retries, concurrency=self.concurrency,
                            max_new_tokens=self.max_new_tokens, temperature=self.temperature)


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
                                           max_len=cfg.jax_max_len, name="judge-jax", deterministic=cfg.deterministic)
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
    from jaxwebrl.judges.verifier import VerifierJudge
    from jaxwebrl.judges.webgym import WebGymRubricJudge

    if backend is None:
        cfg.validate()
    opts = cfg.options()
    space = {"action_space": cfg.action_space} if cfg.action_space else {}
    if cfg.kind == "browseragent":
        if cfg.mode == "exact_match":
            backends: list[JudgeBackend] = []
        elif backend is not None:
            backends = [backend]
        else:
            backends = [make_backend(cfg, u, mesh=mesh) for u in (cfg.url_list or [""])]
        return BrowserAgentJudge(backends, opts, mode=cfg.mode, task_specs=task_specs, **space)  # type: ignore[arg-type]
    backend = backend or make_backend(cfg, mesh=mesh)
    if cfg.kind == "openwebrl":
        return OpenWebRLJudge(backend, opts, system_prompt=cfg.system_prompt or None, task_specs=task_specs, **space)
    if cfg.kind == "verifier":
        return VerifierJudge(backend, opts, system_prompt=cfg.system_prompt or None, task_specs=task_specs, **space)
    if cfg.kind == "webgym_rubric":
        return WebGymRubricJudge(backend, opts, task_specs=task_specs, **space)
    if cfg.kind == "nnetnav_orm":
        return NNetNavORM(backend, opts, pass_score=cfg.pass_score, task_specs=task_specs, **space)
    return TrajectoryLabeler(backend, opts, task_specs=task_specs, **space)
