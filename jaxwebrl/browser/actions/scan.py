"""Linear-time text scanners for the action parsers, with a meter of the characters they examine.

A sampled response can be anything: megabytes, long runs of newlines, thousands of unclosed tags. Regexes
such as `<think>.*?</think>` or `^\\s*name` under `re.M` backtrack quadratically on exactly those inputs, and
the parse runs inside an environment step. Every parser therefore works on a bounded prefix of the response
(`bound`) and extracts blocks, lines and tags only through the scanners below, which examine each character
a constant number of times. Each scanner adds what it examined to `METER`, so a test can assert the bound
(characters examined <= a small constant times the bounded input) as a property instead of timing it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterator

#: Longest response prefix any parser reads. A policy's response is at most `max_new_tokens` tokens (a few
#: thousand characters); a longer one is degenerate, and what lies past this prefix is ignored.
MAX_RESPONSE_CHARS = 50_000


@dataclass
class ScanMeter:
    """Characters examined by the scanners since the last `reset` (a property to test, not a timer)."""

    chars: int = 0

    def reset(self) -> None:
        self.chars = 0

    def add(self, n: int) -> None:
        self.chars += n


METER = ScanMeter()


def bound(text: str, limit: int = MAX_RESPONSE_CHARS) -> str:
    """The prefix every parser reads: at most `limit` characters (metered: it is read once)."""
    out = text[:limit]
    METER.add(len(out))
    return out


def find(text: str, sub: str, start: int = 0) -> int:
    """`text.find(sub, start)`, metered with the span it had to look at."""
    i = text.find(sub, start)
    METER.add((len(text) if i < 0 else i + len(sub)) - start)
    return i


@functools.lru_cache(maxsize=32)
def _pair_pattern(open_: str, close: str) -> re.Pattern[str]:
    return re.compile(re.escape(open_) + "(.*?)" + re.escape(close), re.S)


def pairs(text: str, open_: str, close: str) -> Iterator[re.Match[str]]:
    """Each `open_ ... close` span, leftmost and shortest first, without overlap: what
    `re.finditer(open_ + '(.*?)' + close, re.S)` yields, in linear time. That regex is quadratic only because
    an open with no close after it scans to the end of the text, once per such open. Cutting the text after
    its last close (one `rfind`) leaves a close after every open, so each character is scanned once."""
    last = text.rfind(close)
    METER.add(len(text) - max(last, 0))
    if last < 0:
        return iter(())
    region = text[: last + len(close)]
    METER.add(len(region))
    return _pair_pattern(open_, close).finditer(region)


def remove_pairs(text: str, open_: str, close: str, replacement: str = " ") -> str:
    """`text` with every `open_ ... close` span replaced (unclosed opens are kept as they are)."""
    out: list[str] = []
    pos = 0
    for m in pairs(text, open_, close):
        out.append(text[pos:m.start()])
        out.append(replacement)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def last_inner(text: str, open_: str, close: str) -> str | None:
    """Inner text of the last `open_ ... close` span, None when there is none."""
    last = None
    for last in pairs(text, open_, close):
        pass
    return None if last is None else last.group(1)


def line_starts(pattern: re.Pattern[str], text: str) -> list[re.Match[str]]:
    r"""`pattern.finditer(text)` for a `re.M` pattern of the form `^[^\S\n]*<literals>...` whose every
    quantifier stops at a newline and is followed by a disjoint class: each line is scanned a constant
    number of times (the `^\s*` under `re.M` it replaces crossed newlines and was quadratic)."""
    METER.add(len(text))
    return list(pattern.finditer(text))


def match_line(pattern: re.Pattern[str], line: str) -> re.Match[str] | None:
    """`pattern.match(line)`, metered. Only for patterns without nested or adjacent overlapping quantifiers
    (each is linear in the line), applied to one line of a bounded response."""
    METER.add(len(line))
    return pattern.match(line)
