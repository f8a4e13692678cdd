"""Shared pytest setup: keep JAX on the CPU with one device unless a test starts its own subprocess; fail the
session when its tests leave a process running."""

import atexit
import os
import shutil
import tempfile
import uuid

import pytest

import process_leaks
from module_order import longest_first
from slow_tests import leave_out_extended, mark_slow

# The suite compiles hundreds of small programs and runs most a few times, so compiling is much of its CPU
# time: XLA's CPU backend at optimisation level 0 (LLVM codegen only: the HLO passes are the default's, values
# agree to float32 rounding). Whole suite, quiet 2-core machine: 2,039 s -> 1,814 s. Compile-bound tests take
# 15-65% less; run-bound ones more. Subprocesses inherit it (tests/multidevice.device_env), except the
# sglang-jax servers (fixture below); scripts, benchmarks and runs keep the default.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{TEST_XLA_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()
# Many tests and their subprocesses compile the same programs (the main job's smoke run, then the run that
# resumes it, the multihost workers, the scripts): JAX's compilation cache on disk compiles each once per
# suite run. A fresh directory every run, so a local run starts as cold as CI's clean checkout. Tests that
# count compilations turn it off for themselves (fixture `without_compilation_cache`); the sglang-jax
# servers (another JAX, in their own venv) do not use it (fixture below).
CACHE_VARS = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # set (even empty: off) by whoever runs the suite, it stays
    os.environ.update(JAX_COMPILATION_CACHE_DIR=tempfile.mkdtemp(prefix="jaxwebrl-tests-xla-cache-"),
                      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Every process the session starts, directly or not, inherits this marker, so the check at the session's end
# (pytest_sessionfinish) finds a leaked server also when it was orphaned. Set, not defaulted: a pytest run
# inside a test (or an xdist worker) checks its own processes.
os.environ[process_leaks.MARKER_VAR] = f"{os.getpid()}-{uuid.uuid4().hex}"
LEAKS = pytest.StashKey[list]()
LEAKS_OUTPUT = "jaxwebrl_leaked_processes"  # the key a worker reports its leaks under


def pytest_addoption(parser) -> None:
    parser.addoption("--extended", action="store_true", default=False,
                     help="also run the extended tier of whole-run tests (tests/slow_tests.py EXTENDED_TESTS)")
    parser.addoption("--local-variant", action="append", default=None,
                     help="paper config(s) whose local variant tests/test_recipes_local.py runs (default: grpo_openwebrl)")


@pytest.fixture(autouse=True, scope="session")
def sglang_servers_compile_at_xla_default():
    """The sglang-jax server is run-bound (it serves many requests from few programs), so it keeps XLA's
    default optimisation: at level 0 the judge tests that drive it took up to 1.9x longer."""
    from jaxwebrl.engines.sglang_server import SGLangServer

    original = SGLangServer.environment

    def environment(self: SGLangServer) -> dict[str, str]:
        env = original(self)
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace(TEST_XLA_FLAGS, "").strip()
        for name in CACHE_VARS:
            env.pop(name, None)
        return env

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SGLangServer, "environment", environment)
        yield


@pytest.fixture(autouse=True, scope="session")
def sglang_servers_compile_lazily():
    """The sglang-jax servers the tests start compile each program when a request first needs it
    (`--disable-precompile`), not all eleven of its start-up precompile (prefill at 64-4,096 tokens, decode at 1-8
    rows), of which the tests' short prompts use a few. The tiny model's server was ready in 62 s instead of 149 s
    (the same greedy tokens, the first request 4.4 s against 4.8 s; 2026-11-29, loaded machine)."""
    from jaxwebrl.engines.sglang_server import SGLangServer

    original = SGLangServer.command

    def command(self: SGLangServer) -> list[str]:
        cmd = original(self)
        if self.backend == "sgl_jax" and "--disable-precompile" not in cmd:
            cmd.append("--disable-precompile")
        return cmd

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SGLangServer, "command", command)
        yield


@pytest.fixture
def without_compilation_cache():
    """For a test that counts XLA compilations: a program another test already compiled would come from the
    disk cache without a compile event."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once whether the cache is on; make it decide again
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
        compilation_cache.reset_cache()


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the session when a process its tests started (a server, a browser, a worker) is still running once
    every fixture has been torn down; list them, then kill them so the leak ends with the run. Under xdist each
    worker checks its own processes and hands what it found to the controller (`workeroutput`, read in
    `pytest_testnodedown`); the controller runs no test, and its workers are still its children here (xdist
    ends them after this hook), so it only reports."""
    config = session.config
    if config.pluginmanager.getplugin("dsession") is None:
        leaked = process_leaks.leftover_processes(os.getpid(), os.environ[process_leaks.MARKER_VAR])
        if leaked:
            process_leaks.kill(leaked)
        config.stash[LEAKS] = [str(p) for p in leaked]
        if hasattr(config, "workeroutput"):  # an xdist worker
            config.workeroutput[LEAKS_OUTPUT] = config.stash[LEAKS]
    if config.stash.get(LEAKS, []) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)  # an xdist hook: known only when pytest-xdist is installed
def pytest_testnodedown(node, error) -> None:
    """xdist controller: a finished worker's leaked processes (it has killed them) are this session's."""
    leaked = getattr(node, "workeroutput", {}).get(LEAKS_OUTPUT, [])
    node.config.stash[LEAKS] = node.config.stash.get(LEAKS, []) + [f"{p} (in {node.gateway.id})" for p in leaked]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    leaked = config.stash.get(LEAKS, [])
    if leaked:
        terminalreporter.section("processes left running", sep="=", red=True, bold=True)
        terminalreporter.line(f"FAILED: the tests left {len(leaked)} process(es) running after the session "
                              "(killed now). Start a server with jaxwebrl.procs.start_group and end it with "
                              "stop_group, which ends its whole process group:", red=True)
        for p in leaked:
            terminalreporter.line(f"  {p}")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "extended: a whole-run test left out unless --extended (tests/slow_tests.py)")


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect, so they see the marker
def pytest_collection_modifyitems(config, items) -> None:
    mark_slow(items)
    leave_out_extended(config, items)
    longest_first(items)


def pytest_generate_tests(metafunc) -> None:
    if "local_variant" in metafunc.fixturenames:
        metafunc.parametrize("local_variant", metafunc.config.getoption("local_variant") or ["grpo_openwebrl"])
