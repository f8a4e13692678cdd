"""NNetNav's agent-side prompts (the judges' prompts live in jaxwebrl/judges/nnetnav.py) and the persona file.

- the explorer's system prompt (paper Listing 2, in our words): simulate a task a given kind of person might
  want, one action at a time, at least 4 actions; the persona is the episode's "task" line;
- the relabeler is the agent's own prompt format (Listing 6 is the paper's agent prompt): the instruction is
  the task, so the data trains exactly the prompt the policy is later run with;
- the stop prompt (Listing 14, in our words): the instruction and the final page -> the answer of the
  final `stop [answer]` action the exploration never issued.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from jaxwebrl.agent.prompts import PromptFormat
from jaxwebrl.browser.actions import get_action_space
from jaxwebrl.judges.backends import ChatMessage
from jaxwebrl.judges.common import clip

EXPLORE_PROMPT = (
    "You are an autonomous agent operating a web interface. You do not get a task: your objective is to "
    "simulate a task that the person described below might ask for, by interacting with the page through the "
    "actions listed.\n"
    "You will see: the person description (as the task), the current page, the actions you already took, and "
    "(when given) a trajectory of natural language descriptions of how your actions changed the page.\n"
    "Available actions:\n{actions}\n\n"
    "Rules:\n"
    "1. Only issue an action that is valid on the current page, one action at a time.\n"
    "2. Reason step by step, then issue the next action.\n"
    "3. To make an interesting task, issue at least 4 actions; more interactions make more interesting tasks.\n"
    "4. Issue at most {max_steps} actions; you may stop exploring earlier.\n\n"
    "{output}"
)
PERSONA_TASK = "Explore the page as this person would. Person description: {persona}"

STOP_PROMPT = (
    "A user gave an instruction to an autonomous agent operating a web browser, and the agent carried out a "
    "sequence of actions. The actions it can take: {actions}\n"
    "You are given the instruction and the final page after the agent finished. The agent's final stop action "
    "was not recorded: your objective is to write it. The stop action carries the answer the instruction asks "
    "for, or N/A when the instruction asks for no information.\n"
    "Examples of valid outputs:\n"
    "1. Let's think step-by-step. The task asks for the person with the most upvotes; the page shows Alice Oh. "
    "In summary, my next action will be ```stop [Alice Oh]```\n"
    "2. Let's think step-by-step. The task was to set a price, which is done. In summary, my next action will "
    "be ```stop [N/A]```\n"
    "Rules: reason step by step first; end with \"In summary, my next action will be\" and the stop action in "
    "a ``` fence."
)
_STOP = re.compile(r"stop\s*\[([^\]\n]*)\]")


def explore_system_prompt(fmt: PromptFormat, max_steps: int) -> str:
    """The explorer's system prompt in the run's action space and output format."""
    space = get_action_space(fmt.action_space)
    return EXPLORE_PROMPT.format(actions=space.description, max_steps=max_steps, output=fmt.output_instructions)


def persona_task(persona: str) -> str:
    return PERSONA_TASK.format(persona=persona)


def stop_messages(instruction: str, final_page: str, action_space: str, max_chars: int = 3000) -> list[ChatMessage]:
    space = get_action_space(action_space)
    return [ChatMessage("system", STOP_PROMPT.format(actions=space.description)),
            ChatMessage("user", f"Instruction: {instruction}\n\nFinal state:\n{clip(final_page, max_chars)}")]


def parse_stop_answer(text: str) -> str | None:
    """The answer of the last `stop [answer]` in `text`; None when there is none."""
    found = _STOP.findall(text)
    return found[-1].strip() if found else None


def load_personas(path: str | Path) -> list[str]:
    """One persona per non-empty line; '#' starts a comment. A clear error names the file and the fix."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"personas file {str(p)!r} does not exist; set nnetnav.personas_file to a text file "
                                "with one persona description per line (see envs/personas/miniwob.txt)")
    personas = [line.split("#", 1)[0].strip() for line in p.read_text().splitlines()]
    personas = [x for x in personas if x]
    if not personas:
        raise ValueError(f"personas file {str(p)!r} lists no persona; write one description per line")
    return personas


def sample_persona(personas: list[str], task_id: str, seed: int) -> str:
    """The episode's persona, reproducible from (task, seed)."""
    return personas[random.Random(f"{task_id}/{seed}").randrange(len(personas))]
