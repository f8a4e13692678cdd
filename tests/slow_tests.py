"""The fast tier: the tests marked `slow` (`-m "not slow"` leaves them out of the work loop; the full suite
runs them all).

A test function is slow when one of its cases took 15 s or more (call and setup) in one run of the whole
suite on the 2-core machine (2026-11-27, beside other jobs: 4,204 s of tests against the quiet machine's
1,880 s, so about twice its times); the seconds beside an entry are all its cases together. A module is slow
as a whole when its tests share one costly fixture (a sglang-jax server, the main job's run, two JAX
processes, BrowserGym's venv), which would otherwise move to the first fast test that uses it.
"""

from __future__ import annotations

import pytest

SLOW_MODULES = (
    "tests/test_recipes_online.py",  # the quick main job (267 s with its fixture) and the runs that reuse it
    "tests/test_recipes_local.py",  # a paper's local variant end to end (297 s)
    "tests/test_judges_online_sglang.py",  # sglang-jax judge servers (246 s)
    "tests/test_judges_sglang.py",
    "tests/test_engine_sglang.py",
    "tests/test_engine_sglang_reload.py",
    "tests/test_multihost.py",  # two JAX processes (97 s, 78 s)
    "tests/test_local_vl.py",  # the visual local run (119 s)
    "tests/test_dry_run_configs.py",  # paper configs compiled at paper shapes (94 s)
    "tests/browser/test_miniwob_browsergym.py",  # BrowserGym's own venv and driver
    "tests/test_interop_agentlab.py",
    "tests/test_models_gguf.py",  # the real SmolLM2 file: greedy generation 98 s, SFT step + export 72 s
    "tests/test_gpu_check.py",  # the GPU proof's CPU smoke, every section (about 150 s)
    "tests/browser/test_serve.py",
    "tests/test_main_job_pretrained.py",  # the quick main job from SmolLM2 (about 6 min quiet)
    "tests/test_engine_smollm2.py",  # JaxEngine against transformers on the real 30-layer model  # browser servers started and killed (29 tests, 244 s)
)

SLOW_TESTS = (
    "tests/test_engine_deterministic.py::test_a_request_is_bit_identical_alone_and_among_others",  # 32.6 s (2026-11-27 run)
    "tests/test_train_trainable_layers.py::test_top_layers_get_the_full_models_gradient_and_the_rest_none",  # 21.9 s
    "tests/browser/test_pool.py::test_hundred_episodes_no_leak",  # 87.0 s
    "tests/test_train_sharded.py::test_sharded_step_equals_single_device",  # 83.0 s
    "tests/test_agent_vl.py::test_last_k_screenshots_token_in_token_out_with_images",  # 81.8 s
    "tests/test_rollout.py::test_async_and_lockstep_collection",  # 80.5 s
    "tests/test_recipe_mechanisms.py::test_openwebrl_format_gate_dynamic_sampling_horizon_and_epochs",  # 62.8 s
    "tests/test_train_vl.py::test_vl_train_step_matches_hand_loss_and_sharded_equals_single_device",  # 59.8 s
    "tests/browser/test_demonstrations.py::test_miniwob_demonstrations_succeed_in_every_grammar",  # 59.6 s
    "tests/browser/test_security.py::test_no_vector_reaches_a_forbidden_origin",  # 57.1 s
    "tests/test_agent_episode.py::test_other_strategies_record_exact_contexts",  # 51.2 s
    "tests/test_nnetnav.py::test_relabeled_data_loads_in_the_sft_path_and_trains",  # 48.2 s
    "tests/browser/test_demonstrations.py::test_paper_configs_render_their_demonstrations",  # 46.2 s
    "tests/test_judge_training.py::test_labeler_training_quick_trains_labels_through_the_engine_and_writes_its_report",  # 46.0 s
    "tests/browser/test_sites.py::test_every_task_is_solvable",  # 45.2 s
    "tests/test_rollout_overlap.py::test_overlap_lag_versions_and_crash_resume",  # 44.4 s
    "tests/test_judges_online.py::test_judged_rewards_reach_the_loss",  # 40.4 s
    "tests/test_rollout.py::test_killed_browser_costs_only_its_episodes",  # 37.8 s
    "tests/test_recipe_mechanisms.py::test_webagent_r1_trajectory_samples_and_compressed_history",  # 29.7 s
    "tests/test_models_vl.py::test_kv_cache_decoding_with_images_equals_full_forward_and_generate",  # 29.6 s
    "tests/test_train_resume.py::test_resume_bitwise",  # 26.7 s
    "tests/test_engine_prefix_cache.py::test_shared_prefixes_equal_cache_off_and_transformers",  # 26.3 s
    "tests/test_models_vl_sharded.py::test_sharded_vl_forward_equals_single_device",  # 25.8 s
    "tests/test_train_step.py::test_grpo_logprobs_use_the_rollout_temperature",  # 25.7 s
    "tests/browser/test_miniwob.py::test_reused_context_starts_like_a_fresh_one",  # 24.1 s
    "tests/test_nnetnav.py::test_driver_with_one_tiny_model_for_every_role",  # 23.1 s
    "tests/test_models_sharded.py::test_sharded_forward_equals_single_device",  # 22.8 s
    "tests/test_train_sharded.py::test_dry_run_grpo_tpu_two_layers",  # 21.7 s
    "tests/test_engine_jax.py::test_tensor_parallel_sampling_matches_single_device",  # 21.5 s
    "tests/test_agent_episode.py::test_compress_past_token_in_token_out_over_turns",  # 21.0 s
    "tests/test_trainer_vl.py::test_vl_online_iteration_trains_on_screenshots",  # 20.9 s
    "tests/test_recipe_mechanisms.py::test_webgym_repetition_filter_replay_difficulty_and_memory",  # 20.2 s
    "tests/test_trainer_vl.py::test_trainer_vl_batches_equal_hand_built_and_buckets_compile_once",  # 19.6 s
    "tests/test_engine_jax.py::test_greedy_matches_transformers",  # 19.4 s
    "tests/test_rollout.py::test_per_operation_limits_hold_for_every_operation",  # 18.5 s
    "tests/test_engine_router.py::test_least_outstanding_stickiness_and_failover",  # 18.4 s
    "tests/test_rollout_overlap.py::test_lag_zero_drops_what_the_update_overtook",  # 17.7 s
    "tests/test_viewer.py::test_records_carry_what_the_viewer_shows",  # 17.4 s
    "tests/test_agent_episode.py::test_termination_reasons",  # 17.2 s
    "tests/test_recipe_mechanisms.py::test_browseragent_rft_selection_and_conclusions",  # 16.9 s
    "tests/test_engine_jax.py::test_update_weights_changes_outputs_without_recompiling",  # 16.6 s
    "tests/browser/test_remote_fleet.py::test_lost_server_ends_its_episodes_and_rejoins",  # 16.3 s
    "tests/test_train_resume.py::test_export_checkpoint",  # 16.2 s
)


# The extended tier: whole runs that repeat, on another model or paper, what the suite's own quick main job
# and its unit tests already cover piece by piece. Left out of `./quickstart test` (CI's command) because the
# suite outgrew CI's 90 minutes (5,130 s on the quiet 2-core machine at 4b5f4c7, and CI's machine is up to
# twice as slow); `./quickstart test --extended` runs them too. Seconds: that quiet run.
EXTENDED_TESTS = (
    "tests/test_main_job_pretrained.py::test_quick_main_job_from_smollm2",  # 478 s; SmolLM2's parts: test_models_gguf, test_engine_smollm2
    "tests/test_recipes_local.py::test_local_variant_trains",  # 236 s; each recipe's update: test_recipe_mechanisms
    "tests/test_judges_online_sglang.py::test_judge_server_killed_mid_run_then_restarted",  # 145 s; judge errors: test_judges_online
    "tests/browser/test_miniwob_browsergym.py::test_browsergym_mode_matches_browsergym_miniwob",  # 110 s
    "tests/test_local_vl.py::test_visual_local_run_quick",  # 82 s; VL online iteration: test_trainer_vl
)


def _function_id(item: pytest.Item) -> str:
    """`path::function` of a test case (its parameters dropped), as the lists above name it."""
    path, _, rest = item.nodeid.partition("::")
    return f"{path}::{rest.split('[')[0]}"


def leave_out_extended(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the extended tier `extended` and deselect it unless `--extended` (or a -m expression naming it)
    asks for it."""
    wanted = config.getoption("extended") or "extended" in (config.getoption("markexpr") or "")
    keep, dropped = [], []
    for item in items:
        if _function_id(item) in EXTENDED_TESTS:
            item.add_marker(pytest.mark.extended)
            if not wanted:
                dropped.append(item)
                continue
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def mark_slow(items: list[pytest.Item]) -> None:
    """Mark the listed tests `slow`; a listed test that its module no longer defines is an error, so the list
    cannot rot silently when a test is renamed."""
    modules = {}
    for item in items:
        path = item.nodeid.partition("::")[0]
        modules.setdefault(path, getattr(item, "module", None))
        if path in SLOW_MODULES or _function_id(item) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    stale = [t for t in SLOW_TESTS + EXTENDED_TESTS if modules.get(t.split("::")[0]) is not None
             and not hasattr(modules[t.split("::")[0]], t.split("::")[1])]
    if stale:
        raise pytest.UsageError(f"tests/slow_tests.py lists tests their modules do not define: {stale}; "
                                "rename or remove the entries")
