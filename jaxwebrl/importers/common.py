"""What every importer shares: reading records with their line numbers, errors that name the file, the line
and the missing field, the source-neutral `Episode`, and its tokenisation into `Trajectory` records.

Tokenisation follows our SFT path (demos/collect.py `render_demonstrations`): each turn's context is
rendered with the tokenizer's chat template by `agent.render.PromptRenderer` (earlier assistant messages
spliced in as their token ids), the response is the source's assistant text encoded without special tokens
plus the end-of-turn token, so the loss falls on the response and its end-of-turn only.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence

from transformers import PreTrainedTokenizerBase

from jaxwebrl.agent.render import Message, PromptRenderer
from jaxwebrl.browser.actions import ParseError, get_action_space
from jaxwebrl.data.records import Trajectory, Turn


class FormatError(ValueError):
    """A record that does not have the shape its format needs; the message names file, line and field."""

    def __init__(self, path: str | os.PathLike[str], line: int, message: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")


@dataclasses.dataclass
class Record:
    """One source record and where it starts (1-based line)."""

    path: str
    line: int
    data: Any

    def error(self, message: str) -> FormatError:
        return FormatError(self.path, self.line, message)

    def field(self, name: str, kind: type | tuple[type, ...], where: Any = None, what: str = "") -> Any:
        """`where[name]` (default: the record), checked for type; a FormatError names the missing field."""
        obj = self.data if where is None else where
        label = f"{what}.{name}" if what else name
        if not isinstance(obj, dict):
            raise self.error(f"expected a JSON object{' at ' + what if what else ''}, got {type(obj).__name__}")
        if name not in obj:
            raise self.error(f"missing field {label!r}")
        value = obj[name]
        if not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(f"field {label!r} must be {names}, got {type(value).__name__}")
        return value


def read_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Records of a .jsonl file (one per line) or a .json file (an array of objects, or one object), each with
    the line it starts on. A truncated file fails with the line where the JSON broke off."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file; point the importer at your local copy of the data")
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield Record(str(p), n, json.loads(line))
            except json.JSONDecodeError as exc:
                raise FormatError(p, n, f"not valid JSON ({exc.msg} at column {exc.colno}); the file may be "
                                        "truncated or not JSON Lines") from None
        return
    if p.suffix != ".json":
        raise FormatError(p, 0, "unsupported file type; give a .jsonl (one record per line) or a .json file "
                                "(convert parquet with `pandas.read_parquet(p).to_json(out, orient='records', lines=True)`)")
    dec = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if i < len(text) and text[i] == "[":
        i = _skip_ws(text, i + 1)
        while i < len(text) and text[i] != "]":
            line = text.count("\n", 0, i) + 1
            try:
                obj, i = dec.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                raise FormatError(p, exc.lineno, f"not valid JSON ({exc.msg}); the file may be truncated") from None
            yield Record(str(p), line, obj)
            i = _skip_ws(text, i)
            if i < len(text) and text[i] == ",":
                i = _skip_ws(text, i + 1)
        if i >= len(text):
            raise FormatError(p, text.count("\n") + 1, "the JSON array is not closed; the file is truncated")
        return
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(p, exc.lineno, f"not valid JSON ({exc.msg}); the file may be truncated") from None
    yield Record(str(p), 1, obj)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


@dataclasses.dataclass
class ImportedTurn:
    """One response and the chat it answered (system/user/tool messages and earlier assistant texts)."""

    context: list[tuple[str, str]]  # (role, content)
    response: str
    observation: str = ""


@dataclasses.dataclass
class Episode:
    """A source trajectory before tokenisation. `conversation`: the turns' contexts are one growing chat
    (context_j = context_{j-1} + [assistant_{j-1}] + new messages), so trajectory-level samples can be cut."""

    task_id: str
    turns: list[ImportedTurn]
    reward: float = 1.0
    group_id: str = ""
    conversation: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = eos if isinstance(eos, int) and eos >= 0 and eos != tokenizer.unk_token_id else tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an eos token to close a response with")
    return int(eos)


def tokenize(episodes: Sequence[Episode], tokenizer: PreTrainedTokenizerBase, action_space: str) -> list[Trajectory]:
    """Episodes -> Trajectory records (see the module docstring). `Turn.action` is the action `action_space`
    parses from the response; `format_ok` is False when it parses none (the turn is still trained)."""
    renderer = PromptRenderer(tokenizer)
    eos = end_of_turn_id(tokenizer)
    space = get_action_space(action_space)
    encode = lambda s: list(tokenizer.encode(s, add_special_tokens=False))  # noqa: E731
    out = []
    for ep in episodes:
        turns: list[Turn] = []
        pieces: list[list[int]] = []
        for t in ep.turns:
            msgs = [Message(role, content, tuple(encode(content)) + (eos,) if role == "assistant" else None)
                    for role, content in t.context]
            rendered = renderer.render(msgs)
            pieces = rendered.pieces
            parsed = space.parse(t.response)
            ok = not isinstance(parsed, ParseError)
            action = "\n".join(a.raw for a in parsed) if ok else ""
            turns.append(Turn(prompt_ids=list(rendered.ids), response_ids=encode(t.response) + [eos],
                              observation=t.observation, action=action, format_ok=ok))
        if ep.conversation and len(pieces) == len(turns):
            for turn, piece in zip(turns, pieces):
                turn.history_ids = list(piece)
        out.append(Trajectory(task_id=ep.task_id, turns=turns, reward=float(ep.reward),
                              group_id=ep.group_id or ep.task_id, termination="done", metadata=dict(ep.metadata)))
    return out
