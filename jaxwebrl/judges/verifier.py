"""The judge trained here (`jaxwebrl.judge_training.verifier`, configs/judge_local.py): a generative verifier.

It reads the OpenWebRL judge prompt (the instruction, the actions with the environment's feedback, the last
`num_observations` pages) for *every* episode, not only those that ended with done(answer) (a MiniWoB++
episode ends when the page says so, with no answer), and writes SUCCESS or NOT SUCCESS; reward 1 / 0. The
prompt is the one it was trained on: `judge_training` renders its examples with this class, so the defaults
here are the training defaults. No verdict, a timeout or a dead engine: judge_error.
"""

from __future__ import annotations

from jaxwebrl.judges.backends import JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeInput, TaskSpecLookup, Verdict
from jaxwebrl.judges.common import failed, unparsable
from jaxwebrl.judges.openwebrl import OpenWebRLJudge
from jaxwebrl.judges.parsing import parse_success

VERIFIER_SYSTEM = ("You judge a web agent's episode. Read the task, the agent's actions with the environment's "
                   "feedback, and the final page. Answer SUCCESS if the task was completed, else NOT SUCCESS.")
VERIFIER_OBSERVATIONS = 2  # the page the last action was taken on (its element ids) and the final one
VERIFIER_OBSERVATION_CHARS = 800


class VerifierJudge(OpenWebRLJudge):
    """See the module doc."""

    name = "verifier"

    def __init__(self, backend: JudgeBackend | None, options: JudgeOptions | None = None, *, action_space: str = "bid",
                 num_observations: int = VERIFIER_OBSERVATIONS, max_observation_chars: int = VERIFIER_OBSERVATION_CHARS,
                 system_prompt: str | None = None, task_specs: TaskSpecLookup | None = None,
                 name: str | None = None) -> None:
        super().__init__(backend, options, action_space=action_space, num_observations=num_observations,  # type: ignore[arg-type]
                         max_observation_chars=max_observation_chars, system_prompt=system_prompt or VERIFIER_SYSTEM,
                         task_specs=task_specs, name=name)

    async def _judge(self, inp: JudgeInput) -> Verdict:
        call = await self._call("verdict", self.messages(inp))
        if call.error_kind is not None:
            return failed(call)
        success = parse_success(call.text)
        if success is None:
            return failed(unparsable(call, "SUCCESS / NOT SUCCESS verdict"))
        return Verdict("success" if success else "failure", float(success), float(success), text=call.text,
                       token_ids=call.token_ids, calls=(call,), extra={"termination": inp.termination})
