"""The order the test modules run in: the longest first, so that quickstart's test processes (`-n 2 --dist
loadfile`, each running whole modules) end together instead of one running a long module alone at the end
(longest-processing-time-first scheduling). Seconds: each module's setup, call and teardown in one whole run
(2026-11-29 at 05fe5de, one process, beside a nice-19 training run: 668 passed in 2,320 s; modules of 10 s
or more). A module not listed runs after these, in collection order; a listed path that no longer exists
only loses its place.
"""

from __future__ import annotations

import pytest

MODULE_SECONDS = {
    "tests/test_recipes_online.py": 348,
    "tests/browser/test_demonstrations.py": 241,
    "tests/browser/test_pool.py": 110,
    "tests/test_recipe_mechanisms.py": 108,
    "tests/browser/test_security.py": 107,
    "tests/test_multihost.py": 97,
    "tests/browser/test_miniwob.py": 94,
    "tests/test_models_gguf.py": 92,
    "tests/test_engine_sglang.py": 69,
    "tests/test_engine_smollm2.py": 64,
    "tests/test_nnetnav.py": 56,
    "tests/browser/test_sites.py": 48,
    "tests/test_train_vl.py": 45,
    "tests/test_rollout_overlap.py": 44,
    "tests/test_gpu_check.py": 43,
    "tests/test_rollout.py": 40,
    "tests/test_models_cache.py": 37,
    "tests/test_train_step.py": 36,
    "tests/test_interop_agentlab.py": 35,
    "tests/test_engine_jax.py": 35,
    "tests/test_dry_run_configs.py": 35,
    "tests/test_trainer_vl.py": 34,
    "tests/test_judges_sglang.py": 31,
    "tests/test_models_attention.py": 31,
    "tests/test_judge_training.py": 30,
    "tests/test_agent_vl.py": 28,
    "tests/test_agent_episode.py": 28,
    "tests/test_train_sharded.py": 26,
    "tests/test_viewer.py": 24,
    "tests/test_engine_sglang_reload.py": 24,
    "tests/browser/test_remote_fleet.py": 21,
    "tests/test_models_vl.py": 21,
    "tests/test_models_hf.py": 21,
    "tests/test_engine_deterministic.py": 19,
    "tests/test_engine_vl.py": 17,
    "tests/browser/test_actions.py": 17,
    "tests/test_judges_online.py": 17,
    "tests/test_train_trainable_layers.py": 15,
    "tests/test_models_sharded.py": 12,
    "tests/browser/test_parsers_fuzz.py": 11,
    "tests/test_models_vl_sharded.py": 11,
    "tests/test_train_resume.py": 10,
    "tests/browser/test_coordinates.py": 10,
}


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place by their module's seconds, longest first. The sort is stable, so each module's
    tests stay together in their own order (its module-scoped fixtures are built once)."""
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.nodeid.partition("::")[0], 0))
