"""AgentLab interop: one BrowserGym MiniWoB++ episode run by BrowserGym's experiment loop (the one AgentLab
drives) with `JaxWebRLAgentArgs` on a tiny random jaxwebrl checkpoint (JaxEngine in-process).

It runs in the BrowserGym venv (playwright 1.44 there) as a subprocess; the test prepares that venv with
scripts/setup_browsergym_env.sh --with-jaxwebrl and skips, saying why, only if the script fails. Checks: the
episode ran steps, each step's action came from our prompt -> engine -> parse path (prompt tokens, the
engine's response ids/logprobs, and the action equals the parsed call or `noop()` after a parse error), and
BrowserGym executed every action without an error."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from envs.miniwob import MiniWoBServer
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 3


def browsergym_python() -> str:
    venv = Path(os.environ.get("BROWSERGYM_VENV", REPO / ".venv-browsergym"))
    proc = subprocess.run(["bash", str(REPO / "scripts" / "setup_browsergym_env.sh"), "--with-jaxwebrl"],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "BROWSERGYM_VENV": str(venv)})
    if proc.returncode != 0:
        pytest.skip(f"scripts/setup_browsergym_env.sh --with-jaxwebrl failed (exit {proc.returncode}): "
                    f"{proc.stderr.strip()[-500:]}")
    return str(venv / "bin" / "python")


MAPPING_CHECK = """
from browsergym.core.action.highlevel import HighLevelActionSet
from jaxwebrl.browser.actions import get_action_space
from jaxwebrl.interop.agentlab import ACTION_SUBSETS, NOT_IN_BROWSERGYM, to_browsergym
from jaxwebrl.browser.actions.bid import SIGNATURES
calls = ["click('12')", "dblclick('3')", "hover('3')", "fill('4', 'it''s')", "clear('4')", "focus('4')",
         "press('4', 'Enter')", "select_option('5', 'Red')", "scroll(0, 200)", "keyboard_press('Enter')",
         "keyboard_type('abc')", "goto('http://127.0.0.1/')", "go_back()", "go_forward()", "new_tab()",
         "tab_focus(0)", "tab_close()", "noop(wait_ms=500)", "send_msg_to_user('42')"]
covered = {c.split('(')[0] for c in calls} | set(NOT_IN_BROWSERGYM)
assert covered == set(SIGNATURES), set(SIGNATURES) - covered
action_set = HighLevelActionSet(subsets=ACTION_SUBSETS, strict=False, multiaction=False)
space = get_action_space("bid")
for call in calls:
    (action,) = space.parse(call)
    code = action_set.to_python_code(to_browsergym(action))  # raises if BrowserGym cannot parse it
    assert action.name + "(" in code, (call, code)
print(len(calls))
"""


def test_every_bid_call_maps_to_a_browsergym_action():
    """Each call of our `bid` space (but check/uncheck, which BrowserGym lacks) becomes a call that
    BrowserGym's own action parser accepts."""
    python = browsergym_python()
    proc = subprocess.run([python, "-c", MAPPING_CHECK], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "19"


def run_driver(tmp_path: Path, policy: str) -> dict:
    python = browsergym_python()
    ckpt = tmp_path / "policy"
    make_tiny_checkpoint(ckpt, tiny_config("qwen3", vocab_size=512, max_position_embeddings=4096))
    server = MiniWoBServer().start()
    try:
        proc = subprocess.run(
            [python, str(REPO / "tests" / "agentlab_episode_driver.py"), str(ckpt), f"{server.url}/miniwob/",
             "click-button", "0", str(MAX_STEPS), str(tmp_path / "exp"), policy],
            capture_output=True, text=True, timeout=500, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"})
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_scripted_policy_through_the_agent_solves_the_task_in_browsergym(tmp_path):
    """A scripted Engine (says so: it reads the prompt and clicks the named button) behind the same agent:
    BrowserGym's AXTree bids reach the prompt, our parser's call reaches BrowserGym, the task is solved."""
    out = run_driver(tmp_path, "scripted")
    assert out["summary"]["err_msg"] is None, out["summary"]
    first = out["steps"][0]
    assert first["parse_error"] is None and first["parsed"] == [first["action"]]
    assert re.fullmatch(r"click\('\d+', 'left'\)", first["action"]), first["action"]
    assert out["summary"]["terminated"] and out["summary"]["cum_reward"] == 1.0, out["summary"]
    assert out["summary"]["n_steps"] == 1


def test_agentlab_loop_runs_a_miniwob_episode_with_the_jaxwebrl_agent(tmp_path):
    """The tiny random checkpoint on JaxEngine: it does not solve anything, but every step is ours."""
    out = run_driver(tmp_path, "model")
    for s in out["steps"]:
        print(s["step"], repr(s["action"]), s["prompt_tokens"], repr((s["response"] or "")[:40]), s["parse_error"])
    assert out["summary"]["err_msg"] is None, out["summary"]
    acted = [s for s in out["steps"] if s["action"] is not None]
    assert len(acted) == MAX_STEPS == out["summary"]["n_steps"], out["summary"]  # a random policy never solves it
    assert out["summary"]["truncated"] and not out["summary"]["terminated"]
    for s in acted:
        assert s["engine"] == "jax" and s["prompt_tokens"] > 0
        assert 0 < len(s["response_ids"]) == len(s["logprobs"]) <= 16
        assert all(lp <= 0 for lp in s["logprobs"])
        if s["parse_error"] is None:
            assert s["parsed"] and s["action"] == s["parsed"][0], s
        else:
            assert s["action"] == "noop()" and not s["parsed"], s
    for s in out["steps"][1:]:  # what BrowserGym reports after each of our actions
        assert not s["last_action_error"], s
    assert out["steps"][0]["goal"].startswith("Click on the")
