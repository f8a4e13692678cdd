"""Run browsergym-miniwob episodes with fixed actions and print what happened as JSON (one object).

Runs inside the BrowserGym venv (scripts/setup_browsergym_env.sh), not in jaxwebrl's: browsergym-core pins
playwright 1.44. It imports nothing from jaxwebrl, so jaxwebrl can call it as a subprocess:

    .venv-browsergym/bin/python jaxwebrl/interop/browsergym_miniwob_runner.py < request.json

Request: {"miniwob_url": "http://127.0.0.1:PORT/miniwob/", "chromium": "/usr/bin/chromium",
          "episodes": [{"task": "click-button", "seed": 3, "actions": [["click", "css=button"], ...]}]}
Actions are Playwright calls given as [op, selector, value?] with op in click / fill / press; they are sent
through BrowserEnv.step as Python code (action_mapping=None), so BrowserGym's own step, validation and
reward run. Reply: {"episodes": [{task, seed, utterance, text_start, text_end, viewport, rewards,
terminated, raw_reward, errors}]}.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TEXT_JS = "() => document.body.innerText"


def action_code(action: list[str]) -> str:
    op, selector = action[0], action[1]
    if op == "click":
        return f"page.click({selector!r})"
    if op == "fill":
        return f"page.fill({selector!r}, {action[2]!r})"
    if op == "press":
        return f"page.press({selector!r}, {action[2]!r})"
    raise ValueError(f"unknown action op {op!r}; use click, fill or press")


def run_episode(ep: dict[str, Any], chromium: str) -> dict[str, Any]:
    import gymnasium as gym

    # slow_mo and pre_observation_delay are waits (100 ms per Playwright call, 0.5 s before each
    # observation); the MiniWoB++ tasks compared here end their episode synchronously in the click handler,
    # so shorter waits change only the run time. The gym passive checker would run an extra reset.
    env = gym.make(f"browsergym/miniwob.{ep['task']}", disable_env_checker=True, headless=True,
                   action_mapping=None, slow_mo=0, pre_observation_delay=0.1,
                   pw_chromium_kwargs={"executable_path": chromium})
    try:
        obs, info = env.reset(seed=ep["seed"])
        page = env.unwrapped.page
        out: dict[str, Any] = {
            "task": ep["task"], "seed": ep["seed"], "utterance": obs["goal"],
            "text_start": page.evaluate(TEXT_JS), "viewport": page.viewport_size,
            "rewards": [], "terminated": False, "errors": [],
        }
        for action in ep["actions"]:
            obs, reward, terminated, truncated, info = env.step(action_code(action))
            out["rewards"].append(float(reward))
            out["errors"].append(obs["last_action_error"])
            out["terminated"] = bool(terminated)
            if terminated:
                break
        out["raw_reward"] = float(page.evaluate("() => WOB_RAW_REWARD_GLOBAL"))
        out["text_end"] = page.evaluate(TEXT_JS)
        return out
    finally:
        env.close()


def main() -> None:
    req = json.load(sys.stdin)
    os.environ["MINIWOB_URL"] = req["miniwob_url"]  # read by browsergym-miniwob's AbstractMiniwobTask
    # BrowserGym's chat window launches Playwright's default Chromium; the setup script links it to the
    # system one inside the venv.
    os.environ.setdefault("PLAYWRIGHT_BROWSERS_PATH", os.path.join(sys.prefix, "ms-playwright"))
    import browsergym.miniwob  # noqa: F401 - registers the browsergym/miniwob.* environments

    chromium = req.get("chromium", "/usr/bin/chromium")
    json.dump({"episodes": [run_episode(ep, chromium) for ep in req["episodes"]]}, sys.stdout)


if __name__ == "__main__":
    main()
