"""Run one BrowserGym MiniWoB++ episode through AgentLab's experiment loop with the jaxwebrl agent; print
JSON. Runs in the BrowserGym venv (scripts/setup_browsergym_env.sh --with-jaxwebrl), jaxwebrl on
PYTHONPATH. argv: checkpoint, MiniWoB++ url (.../miniwob/), task, seed, max_steps, exp_root, policy.

policy `model`: JaxWebRLAgentArgs on the checkpoint (JaxEngine). policy `scripted`: the same agent class
over a scripted Engine that reads the rendered prompt (decoded from its token ids) and answers with a click
on the button the goal names, in our `bid` syntax, so the whole path prompt -> parse -> BrowserGym action
-> reward is exercised with a known-good answer."""

from __future__ import annotations

import json
import os
import sys

checkpoint, miniwob_url, task, seed, max_steps, exp_root, policy = sys.argv[1:8]
os.environ["MINIWOB_URL"] = miniwob_url
os.environ.setdefault("PLAYWRIGHT_BROWSERS_PATH", os.path.join(sys.prefix, "ms-playwright"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import browsergym.experiments.loop as bg_loop  # noqa: E402
import browsergym.experiments.utils as bg_utils  # noqa: E402
import browsergym.miniwob  # noqa: E402,F401 - registers the tasks
from browsergym.experiments import EnvArgs, ExpArgs, get_exp_result  # noqa: E402


# The loop's step statistics count tokens with tiktoken's gpt-4 encoding, which tiktoken downloads on first
# use; this machine is offline, so the statistic counts words instead. Nothing else in the loop changes.
def _count_words(text: str, model: str = "gpt-4") -> int:
    return len(str(text).split())


bg_loop.count_tokens = bg_utils.count_tokens = _count_words

import dataclasses  # noqa: E402
import re  # noqa: E402

from jaxwebrl.engines.base import Generation  # noqa: E402
from jaxwebrl.interop.agentlab import JaxWebRLAgent, JaxWebRLAgentArgs, LoopThread  # noqa: E402
from jaxwebrl.models import load_tokenizer  # noqa: E402

class ScriptedEngine:
    """Engine protocol; answers click('<bid>') for the button named in the goal found in the prompt."""

    name = "scripted"

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.prompts = tokenizer, []

    async def generate(self, prompt_ids, params, *, session_id=None) -> Generation:
        prompt = self.tokenizer.decode(prompt_ids)
        self.prompts.append(prompt)
        target = re.search(r'Click on the "([^"]+)" button', prompt).group(1)
        bid = re.search(r"\[(\d+)\] button '" + re.escape(target) + "'", prompt).group(1)
        ids = self.tokenizer.encode(f"click('{bid}')", add_special_tokens=False)
        return Generation(list(ids), [0.0] * len(ids), "stop", len(prompt_ids), 0, 0)

    async def update_weights(self, weights, version) -> None: ...
    async def health(self): return {}
    async def close(self) -> None: ...


@dataclasses.dataclass
class ScriptedArgs(JaxWebRLAgentArgs):
    def make_agent(self) -> JaxWebRLAgent:
        tokenizer = load_tokenizer(self.checkpoint)
        return JaxWebRLAgent(ScriptedEngine(tokenizer), tokenizer, self.agent_config(), LoopThread())


args_class = ScriptedArgs if policy == "scripted" else JaxWebRLAgentArgs
agent_args = args_class(checkpoint=checkpoint, max_new_tokens=16, max_context_tokens=4000)
exp = ExpArgs(agent_args=agent_args, env_args=EnvArgs(task_name=f"miniwob.{task}", task_seed=int(seed),
                                                      max_steps=int(max_steps), headless=True),
              enable_debug=False, save_screenshot=False)
exp.prepare(exp_root)
exp.run()
agent_args.close()
result = get_exp_result(exp.exp_dir)
steps = []
for s in result.steps_info:
    extra = (s.agent_info.get("extra_info") or {}) if s.agent_info else {}
    steps.append({"step": s.step, "action": s.action, "reward": s.reward, "terminated": s.terminated,
                  "truncated": s.truncated, "last_action_error": (s.obs or {}).get("last_action_error", ""),
                  "goal": (s.obs or {}).get("goal", ""), **{k: extra.get(k) for k in
                  ("prompt_tokens", "response", "response_ids", "logprobs", "parsed", "parse_error", "engine")}})
summary = result.summary_info
print(json.dumps({"summary": {k: summary.get(k) for k in ("n_steps", "cum_reward", "err_msg", "terminated",
                                                         "truncated")}, "steps": steps}))
