"""Deterministic verdict parsers, one per output format the papers' judges are asked for.

All of them are linear in the text length (no backtracking regex over unbounded input: whitespace is
collapsed with `str.split`, then plain substring search), read only what follows the last `</think>` (a
thinking judge may mention either verdict while it reasons), and return None when the text holds no verdict,
which the judges turn into `judge_error` (kind "unparsable").
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

THINK_END = "</think>"
_SCORE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?(?![0-9])")  # bounded: "Reward: 999...9" is no score
# Whole words only ("UNSUCCESSFUL" is no verdict); literal patterns after whitespace collapsing: linear search.
_NOT_SUCCESS = re.compile(r"\bNOT SUCCESS\b")
_SUCCESS = re.compile(r"\bSUCCESS\b")
_WORD = re.compile(r"[A-Za-z]+")
_YES_NO = re.compile(r"\b(?:yes|no)\b", re.IGNORECASE)


def after_thinking(text: str) -> str:
    """The part of a response after its last `</think>` (all of it when there is none)."""
    cut = text.rfind(THINK_END)
    return text if cut < 0 else text[cut + len(THINK_END):]


def collapse(text: str) -> str:
    """Whitespace runs -> one space (linear)."""
    return " ".join(text.split())


def parse_success(text: str) -> bool | None:
    """OpenWebRL A.4: NOT SUCCESS is checked before SUCCESS, so a negative verdict is never read as positive.

    Upper-case whole words, as the judge is told to write them; any whitespace between NOT and SUCCESS.
    """
    body = collapse(after_thinking(text))
    if _NOT_SUCCESS.search(body):
        return False
    if _SUCCESS.search(body):
        return True
    return None


def parse_yes_no(text: str) -> bool | None:
    """BrowserAgent B.2 ("output yes otherwise no"): the first word decides; else the only one of the two words
    present; both or neither -> None."""
    body = after_thinking(text)
    first = _WORD.search(body)
    if first is not None and first.group(0).lower() in ("yes", "no"):
        return first.group(0).lower() == "yes"
    seen: set[str] = set()
    for m in _YES_NO.finditer(body):
        seen.add(m.group(0).lower())
        if len(seen) == 2:
            return None
    return ("yes" in seen) if seen else None


def _after_last(body: str, key: str) -> str | None:
    """Text after the last `key` (case-insensitive) in `body`, or None."""
    cut = body.lower().rfind(key.lower())
    return None if cut < 0 else body[cut + len(key):]


def parse_reward(text: str, low: int = 1, high: int = 5) -> int | None:
    """NNetNav Listing 5: the integer in the last "Reward: <n>" (n in [low, high]); markdown stars allowed."""
    rest = _after_last(collapse(after_thinking(text)), "Reward:")
    if rest is None:
        return None
    m = _SCORE.match(rest.lstrip(" *_`\"'"))
    if m is None:
        return None
    value = float(m.group(0))
    if value != int(value) or not low <= value <= high:
        return None
    return int(value)


def parse_field(text: str, key: str, max_chars: int = 2000) -> str | None:
    """The answer after the last "<key>:" (NNetNav's "Instruction:" / "State change:"), first paragraph."""
    rest = _after_last(after_thinking(text), f"{key}:")
    if rest is None:
        return None
    value = rest.strip().split("\n\n", 1)[0].strip().strip("\"'`* ")
    return value[:max_chars] or None


def safe_decode(tokenizer: Any, ids: Sequence[int]) -> tuple[str, int]:
    """Decode sampled ids, dropping ids outside the tokenizer's vocabulary (bad ids from a broken engine);
    returns (text, how many ids were dropped). Bytes that do not form UTF-8 become U+FFFD, never an error."""
    n = len(tokenizer)
    good = [int(i) for i in ids if 0 <= int(i) < n]
    try:
        text = tokenizer.decode(good, skip_special_tokens=True)
    except Exception:  # a tokenizer that cannot decode its own ids: treat as no text
        return "", len(ids)
    return text, len(ids) - len(good)


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """The usual QA exact-match normalisation (lower case, no punctuation, no articles, single spaces)."""
    s = str(s).lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(answer: str | None, references: Sequence[str]) -> bool:
    """BrowserAgent's EM: the normalised answer equals some normalised reference."""
    if answer is None:
        return False
    got = normalize_answer(answer)
    return any(got == normalize_answer(r) for r in references)
