"""tests/module_order.py: the longest modules first, each module's tests kept together and in order."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from module_order import MODULE_SECONDS, longest_first

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_module_exists() -> None:
    missing = [path for path in MODULE_SECONDS if not (ROOT / path).is_file()]
    assert not missing, f"tests/module_order.py lists modules that do not exist: {missing}; update MODULE_SECONDS"


def test_longest_first_keeps_each_modules_tests_together_and_in_order() -> None:
    longest = max(MODULE_SECONDS, key=MODULE_SECONDS.get)
    shortest = min(MODULE_SECONDS, key=MODULE_SECONDS.get)
    ids = ["tests/test_unlisted_a.py::t1", f"{shortest}::t1", f"{shortest}::t2[x]", "tests/test_unlisted_b.py::t1",
           f"{longest}::t1", f"{longest}::t2", f"{longest}::t3"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    longest_first(items)
    assert [i.nodeid for i in items] == [
        f"{longest}::t1", f"{longest}::t2", f"{longest}::t3", f"{shortest}::t1", f"{shortest}::t2[x]",
        "tests/test_unlisted_a.py::t1", "tests/test_unlisted_b.py::t1"]
