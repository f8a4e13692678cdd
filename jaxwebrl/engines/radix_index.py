"""RadixIndex: which KV pages of the prefix cache hold which token blocks (host side, no device arrays).

Why blocks: the RL workload shares long prefixes (the G trajectories of a group share their prompt, each turn
extends the previous turn's context), so the JaxEngine keeps the keys and values of full blocks of
`page_size` tokens in a device page pool (`page_pool.PagePool`) and this index maps token blocks to pages.
A node is one block, keyed by its tokens under its parent, so a path from the root spells a prefix and a
prompt's cached part is the longest path its blocks follow. Only full blocks are indexed: a page is written
once and never changes until evicted.

Memory is a fixed number of pages. When a new block needs one and none is free, the least recently used
leaf that no insertion is extending is evicted (a leaf: evicting an inner node would orphan the blocks
after it). `clear()` forgets everything (weights changed: every cached key and value is stale).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence


@dataclasses.dataclass(eq=False)
class _Node:
    key: tuple[int, ...]
    page: int
    parent: "_Node | None"
    children: dict[tuple[int, ...], "_Node"] = dataclasses.field(default_factory=dict)
    refs: int = 0  # insertions extending this node right now: never evicted while > 0


class RadixIndex:
    """Prefix index over token blocks with LRU eviction of unreferenced leaves; see the module doc."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"RadixIndex needs num_pages >= 1 and page_size >= 1, got {num_pages}, {page_size}")
        self.num_pages = int(num_pages)
        self.page_size = int(page_size)
        self._root = _Node((), -1, None)
        self._free: list[int] = []
        self._lru: collections.OrderedDict[_Node, None] = collections.OrderedDict()  # oldest first
        self.evictions = 0
        self.clear()

    @property
    def cached_blocks(self) -> int:
        return len(self._lru)

    def clear(self) -> None:
        """Forget every block; all pages are free again."""
        self._root.children.clear()
        self._lru.clear()
        self._free = list(range(self.num_pages - 1, -1, -1))  # pop() hands out page 0 first

    def _blocks(self, tokens: Sequence[int], limit: int) -> list[tuple[int, ...]]:
        n = min(len(tokens), limit) // self.page_size
        p = self.page_size
        return [tuple(int(t) for t in tokens[i * p:(i + 1) * p]) for i in range(n)]

    def match(self, tokens: Sequence[int], limit: int | None = None) -> list[int]:
        """Pages of the longest cached prefix of `tokens` in whole blocks, at most `limit` tokens long (a prompt
        leaves its last token to prefill: its logits give the first sampled token). Marks them recently used."""
        node, pages = self._root, []
        for key in self._blocks(tokens, len(tokens) if limit is None else limit):
            child = node.children.get(key)
            if child is None:
                break
            self._lru.move_to_end(child)
            pages.append(child.page)
            node = child
        return pages

    def insert(self, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """Index the full blocks of `tokens`; returns (block index, page) for each block that was not cached
        yet, whose keys and values the caller must now write into that page. Stops early, leaving the rest
        uncached, when no page can be freed."""
        node, new = self._root, []
        path: list[_Node] = []
        try:
            for i, key in enumerate(self._blocks(tokens, len(tokens))):
                child = node.children.get(key)
                if child is None:
                    page = self._take_page()
                    if page is None:
                        break
                    child = _Node(key, page, node)
                    node.children[key] = child
                    self._lru[child] = None
                    new.append((i, page))
                else:
                    self._lru.move_to_end(child)
                child.refs += 1  # the path being extended is not evictable by this insertion's own allocations
                path.append(child)
                node = child
        finally:
            for n in path:
                n.refs -= 1
        return new

    def _take_page(self) -> int | None:
        if not self._free:
            self._evict_one()
        return self._free.pop() if self._free else None

    def _evict_one(self) -> None:
        for node in self._lru:  # oldest first
            if not node.children and node.refs == 0:
                assert node.parent is not None
                del node.parent.children[node.key]
                del self._lru[node]
                self._free.append(node.page)
                self.evictions += 1
                return
