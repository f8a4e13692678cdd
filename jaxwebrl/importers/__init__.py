"""Importers: the web-agent papers' released training data -> our `Trajectory` records (JSONL), tokenised for
a given model so the SFT pipeline (`data.pipeline.trajectory_files_dataset`) trains on it directly.

    python -m jaxwebrl.importers FORMAT IN OUT --tokenizer DIR
    trajs = import_file("nnetnav", "train.jsonl", tokenizer)

Nothing is downloaded: point IN at your local copy (.jsonl, one record per line, or .json, an array).
A record without the fields its format needs (or a truncated file) raises `FormatError` naming the file, the
line and the missing field.

Tokenisation (all formats): each response's context is the source's own chat messages (system, user, tool,
earlier assistant turns), rendered with the target tokenizer's chat template (`agent.render.PromptRenderer`,
earlier assistant turns spliced in as token ids); the response is the source's assistant text, encoded
without special tokens, plus the end-of-turn token (`<|im_end|>`, else eos). Loss falls on response tokens
only. Pre-rendered prompt strings in the sources (Llama-3 / Qwen special tokens baked in) are not reused:
they belong to another model's template. Where a file holds one growing chat per episode (WebRL, OpenWebRL),
`Turn.history_ids` is set so trajectory-level samples (`per="trajectory"`) can be cut as well as per-turn ones.

Field mappings (source field -> Trajectory / Turn field; what is dropped):

webrl — WebRL's LLaMA-Factory ShareGPT SFT set `web_policy_sft`, the 9,460 trajectories WebAgent-R1 clones
(schema: THUDM/WebRL LLaMA-Factory/data/dataset_info.json, "formatting": "sharegpt", messages column
"conversations"; prompt layout "Task Instruction: ... Round k ..." from scripts/process_data.py):
    system (optional) / conversations[from="system"]  -> first chat message of every turn's context
    conversations[from="human"].value                 -> user message; the last one before a response -> Turn.observation
    conversations[from="gpt"].value                   -> one Turn each: response_ids; Turn.action = the do()/exit() call
    "Task Instruction: X" in the first human message  -> Trajectory.task_id "webrl/X", metadata.instruction
    (file, line)                                      -> metadata.file / .line, group_id "task_id#line"
    reward                                            -> 1.0 (released BC demonstrations)
    dropped: any other record field. Action grammar checked: webagent_r1.

webrl_traces — WebRL / WebAgent-R1 rollout traces (THUDM/WebRL scripts/process_data.py: one step per line,
"trace_id", "index", "target", "html", "response" / "fixed_response", "score" after `trace_process`):
    target                            -> task_id "webrl/<target>", metadata.instruction
    html                              -> Turn.observation, and the user turn "Round k\n\n<html>" (the first
                                         prefixed "Task Instruction: <target>\n\n"), as `build_policy_data` lays out
    fixed_response (else response)    -> response_ids; earlier responses stay in the chat (append-only)
    trace_id, index                   -> steps grouped per trace and ordered; group_id "task_id#trace_id"
    score of the last step            -> Trajectory.reward (0.0 when absent: an unjudged trace)
    dropped: prompt, url, window, image, parsed_action.

nnetnav — NNetNav's instruction-tuning JSONL (MurtyShikhar/NNetnav scripts/convert_to_sft.py output; one
record per step, the retroactively relabelled, reward-model-filtered demonstrations):
    messages[:-1] (system, user)     -> the turn's context; user content (objective, URL, a11y tree, previous
                                        actions) -> Turn.observation
    messages[-1].content (assistant) -> response_ids; Turn.action = the ```webarena action```
    task_name (else id)              -> Trajectory.task_id "nnetnav/<task_name>"; steps with the same task_name
                                        become the turns of one trajectory, in file order
    dataset                          -> metadata.dataset; reward -> 1.0
    dropped: prompt and output (the same text pre-rendered in Llama-3's template), n_tokens.
    Action grammar checked: webarena.

browseragent — BrowserAgent SFT/RFT steps (TIGER-Lab/BrowserAgent data_generate.py / extract_rft_multi.py
records {"input_seq", "output_seq"}, or ms-swift {"messages"} from swift_switch.py):
    input_seq / messages[:-1]        -> context (one user prompt: question, current observation, previous
                                        actions, conclusions) -> also Turn.observation
    output_seq / messages[-1]        -> response_ids (think, <conclusion>, ```action```); Turn.action
    "Objective: Q" in the prompt     -> metadata.question; task_id "browseragent/<sha1(Q)[:12]>"; consecutive
                                        steps with the same Q form one trajectory, cut after a `stop` action;
                                        group_id "task_id#k" (RFT keeps one correct rollout per question)
    reward                           -> 1.0 (both sets hold judged-correct rollouts only)
    dropped: nothing else is in a record. Action grammar checked: webarena.

openwebrl — OpenWebRL's curated SFT trajectories `OpenWebRL_SFT_trajectories.jsonl` (schema:
OpenWebRL/OpenWebRL sft/convert_to_openai_messages.py and sft/README.md):
    rows grouped by (metadata.task_id, rollout_idx); the row with the largest metadata.turn_index gives
    metadata.messages, the whole chat:
    messages[role=system|user|tool]  -> context messages (role kept); text of the message before a response
                                        -> Turn.observation; the screenshot placeholder
                                        <|vision_start|><|image_pad|><|vision_end|> -> "[screenshot]"
    messages[role=assistant].content -> one Turn each: response_ids = <think>... + <tool_call>{...}</tool_call>,
                                        arguments rewritten to our openwebrl grammar: point_2d [x, y] -> x, y;
                                        done(response=...) -> done(answer=...); Turn.action = the tool calls
    metadata.task_id, rollout_idx    -> task_id "openwebrl/<task_id>", group_id ".../<rollout_idx>"
    metadata.reward                  -> Trajectory.reward (default 1.0); metadata.intent -> metadata.intent
    dropped: metadata.images (base64 screenshots: our policies are text-only), the row's pre-rendered
    "prompt"/"response" strings, other metadata (domain, start_url, evaluator_reference, ...).
    The canonical Stage-1 form ({"tools", "messages" with structured tool_calls, "metadata"}) maps the same way.
    Action grammar checked: openwebrl.

A response that the format's grammar does not parse is kept (trained) with `Turn.format_ok = False` and an
empty `Turn.action`; the importer reports how many there were.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from transformers import PreTrainedTokenizerBase

from jaxwebrl.importers import browseragent, nnetnav, openwebrl, webrl
from jaxwebrl.importers.common import Episode, FormatError, Record, read_records, tokenize
from jaxwebrl.data.records import Trajectory

# format -> (records -> episodes, the action grammar its responses are written in)
FORMATS: dict[str, tuple[Callable[[Iterable[Record]], list[Episode]], str]] = {
    "webrl": (webrl.episodes, "webagent_r1"),
    "webagent_r1": (webrl.episodes, "webagent_r1"),  # WebAgent-R1's BC set is WebRL's
    "webrl_traces": (webrl.trace_episodes, "webagent_r1"),
    "nnetnav": (nnetnav.episodes, "webarena"),
    "browseragent": (browseragent.episodes, "webarena"),
    "openwebrl": (openwebrl.episodes, "openwebrl"),
}


def read_episodes(fmt: str, path: str | os.PathLike[str]) -> list[Episode]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown import format {fmt!r}; choose one of {sorted(FORMATS)}")
    found = FORMATS[fmt][0](read_records(path))
    if not found:
        raise FormatError(path, 0, f"no {fmt} records in the file")
    return found


def import_file(fmt: str, path: str | os.PathLike[str], tokenizer: PreTrainedTokenizerBase) -> list[Trajectory]:
    """Read `path` in `fmt` and tokenise it for `tokenizer` (see the module docstring)."""
    return tokenize(read_episodes(fmt, path), tokenizer, FORMATS[fmt][1])


def summary(trajs: list[Trajectory]) -> dict[str, Any]:
    turns = [t for tr in trajs for t in tr.turns]
    return {"trajectories": len(trajs), "turns": len(turns), "unparsed_actions": sum(not t.format_ok for t in turns),
            "response_tokens": sum(len(t.response_ids) for t in turns)}


__all__ = ["FORMATS", "FormatError", "import_file", "read_episodes", "summary", "tokenize"]
