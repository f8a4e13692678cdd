"""Shared pytest setup: keep JAX on the CPU with one device unless a test starts its own subprocess."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_addoption(parser) -> None:
    parser.addoption("--local-variant", action="append", default=None,
                     help="paper config(s) whose local variant tests/test_recipes_local.py runs (default: grpo_openwebrl)")


def pytest_generate_tests(metafunc) -> None:
    if "local_variant" in metafunc.fixturenames:
        metafunc.parametrize("local_variant", metafunc.config.getoption("local_variant") or ["grpo_openwebrl"])
