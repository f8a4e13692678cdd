"""The SmolLM2 main job with each target named before its id: `<think>button 'No' [12]</think>click('12')`.

    python scripts/train.py --config configs/grpo_local_smollm2_named.py

`configs/grpo_local_smollm2.py` with two changes that turn finding an element into copies a pretrained
model already makes: the page lists each id after its element's name (`env.ids_after_names`: `button 'No'
[12]`), and every demonstration first names its target as the page shows it (`bc.rationale`), so the id is
the token that follows the name on the page and then a copy from the think into the action. The system prompt
says so, with the example in the same line format. Measured: RESULTS.md ("The target named before its id,
on SmolLM2").

Its BC is three times the base config's: 40 training seeds per demonstrated task (~240 demonstrations) and 90
steps, since 30 steps on 120 demonstrations left BC the weak stage (29.2% against 49.2% on the same 120 test
episodes, RESULTS.md "A longer named BC").
"""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location("grpo_local_smollm2",
                                               os.path.join(os.path.dirname(__file__), "grpo_local_smollm2.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

HELD_OUT = _base.HELD_OUT
SYSTEM_PROMPT = ("You are a web agent. Reply with exactly one action and nothing else. First name the element you "
                 "act on as the page shows it, in <think></think>, then the action. Actions: click('ID') clicks the "
                 "element shown with [ID]; fill('ID', 'text') types text into the element [ID]. Example: the task "
                 "'Click on the \"OK\" button.' on a page with button 'OK' [4] is answered with "
                 "<think>button 'OK' [4]</think>click('4')")


def get_config():
    c = _base.get_config()
    c.workdir = "runs/grpo_local_smollm2_named"
    c.agent.system_prompt = SYSTEM_PROMPT
    c.env.ids_after_names = True
    c.bc.rationale = True
    c.agent.max_new_tokens = 48  # the think is ~10-25 tokens before the action
    c.bc.demonstration_seeds = 40  # ~240 demonstrations
    c.bc.steps = 90  # ~1.5 passes at micro-batch 4
    c.quick_overrides.workdir = "runs/grpo_local_smollm2_named_quick"
    return c
