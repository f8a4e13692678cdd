"""The named SmolLM2 main job with a shorter rationale: the target's name and id only, `<think>'No' [12]</think>`.

    python scripts/train.py --config configs/grpo_local_smollm2_name_first.py

`configs/grpo_local_smollm2_named.py` writes the whole a11y head in the think (`button 'No' [12]`). Its BC
policies fail the demonstrated tasks by naming another element of the right role (`button 'Submit' [8]` for
"Click on the \"Okay\" button."): after `button '` every button on the page continues the text equally well.
Here the think starts with the name itself (`bc.rationale_form="name"`), which the goal states, and the id is
then the token after that name on the page: two copies, the first from the goal. Everything else is the named
config's. Measured: RESULTS.md ("The name first").
"""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location("grpo_local_smollm2_named",
                                               os.path.join(os.path.dirname(__file__), "grpo_local_smollm2_named.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

HELD_OUT = _base.HELD_OUT
SYSTEM_PROMPT = ("You are a web agent. Reply with exactly one action and nothing else. First write the name of the "
                 "element you act on and its id as the page shows them, in <think></think>, then the action. Actions: "
                 "click('ID') clicks the element shown with [ID]; fill('ID', 'text') types text into the element [ID]. "
                 "Example: the task 'Click on the \"OK\" button.' on a page with button 'OK' [4] is answered with "
                 "<think>'OK' [4]</think>click('4')")


def get_config():
    c = _base.get_config()
    c.workdir = "runs/grpo_local_smollm2_name_first"
    c.agent.system_prompt = SYSTEM_PROMPT
    c.bc.rationale_form = "name"
    c.quick_overrides.workdir = "runs/grpo_local_smollm2_name_first_quick"
    return c
