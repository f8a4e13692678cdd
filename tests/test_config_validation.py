"""Every config in configs/ loads and validates; each kind of bad value gives its promised error."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxwebrl.config import ConfigError, default_config, parse_config, validate_config

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


# judge_local and labeler_local are judge-training configs (scripts/train_judge.py; their own fields plus the main job's run config
# as `policy_run`), checked by tests/test_judge_training.py; every other config is a run config.
NOT_RUN_CONFIGS = {"judge_local", "labeler_local"}


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "configs").glob("*.py") if p.stem not in NOT_RUN_CONFIGS))
def test_configs_are_valid(name):
    c = _load(name)
    validate_config(c, num_devices=4, check_paths=False)  # shapes and values; paths are the user's


def test_grpo_tpu_has_the_paper_values():
    c = _load("grpo_tpu")
    assert (c.optim.lr, c.loss.beta, c.loss.eps_low, c.optim.b2, c.optim.max_grad_norm) == (1e-6, 0.001, 0.2, 0.99, 0.01)
    assert (c.data.per, c.data.norm, c.train.seq_len, c.train.groups_per_step) == ("trajectory", "webagent_r1", 16384, 16)
    s = c.model.shape
    assert (s.vocab_size, s.hidden_size, s.intermediate_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim) == (
        151936, 2048, 11008, 36, 16, 2, 128)
    assert s.tie_word_embeddings and s.attention_bias and s.rope_theta == 1e6


def _tiny(tmp_path):
    c = default_config()
    c.workdir = str(tmp_path)
    return c


def test_unknown_field(tmp_path):
    c = _tiny(tmp_path)
    c.optim.unlock()
    c.optim.weight_decy = 0.1
    with pytest.raises(ConfigError, match=r"config\.optim\.weight_decy: is not a known field; did you mean config\.optim\.weight_decay"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.model.shape.num_layer = 2
    with pytest.raises(ConfigError, match=r"model\.shape\.num_layer.*did you mean model\.shape\.num_layers"):
        validate_config(c, 1)


def test_unknown_field_on_command_line():
    # absl/ml_collections refuse an override of a field that does not exist (the config is locked)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--config", str(ROOT / "configs" / "sft_synthetic.py"),
                        "--config.optim.learning_rate=1e-3", "--dry_run"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "learning_rate" in r.stderr


def test_batch_not_divisible_by_data_parallel(tmp_path):
    c = _tiny(tmp_path)
    c.mesh = {"data": 2, "fsdp": 2, "tensor": 1}
    c.train.micro_batch = 6
    with pytest.raises(ConfigError, match=r"config\.train\.micro_batch: 6 is not divisible by the data-parallel size 4.*multiple of 4"):
        validate_config(c, 4)


def test_mesh_larger_than_devices(tmp_path):
    c = _tiny(tmp_path)
    c.mesh = {"data": 2, "fsdp": 4, "tensor": 1}
    with pytest.raises(ConfigError, match=r"config\.mesh: .* needs 8 devices but only 2 exist; shrink the mesh"):
        validate_config(c, 2)


def test_missing_paths(tmp_path):
    c = _tiny(tmp_path)
    c.model.source = "hf"
    c.model.path = str(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"config\.model\.path: .*has no config\.json; point it at a HuggingFace"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.data.train_files = str(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match=r"config\.data\.train_files: .*missing\.jsonl' does not exist"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.checkpoint.resume = True
    with pytest.raises(ConfigError, match=r"config\.checkpoint\.resume: is true but .* holds no checkpoint"):
        validate_config(c, 1)


def test_bad_choices(tmp_path):
    c = _tiny(tmp_path)
    c.data.norm = "per_token"
    with pytest.raises(ConfigError, match=r"config\.data\.norm: 'per_token' is not allowed; use one of"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.train.logits_chunk = 100
    with pytest.raises(ConfigError, match=r"config\.train\.logits_chunk: 100 does not divide"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.rl.replay_demonstrations = -2
    with pytest.raises(ConfigError, match=r"config\.rl\.replay_demonstrations: -2 must be >= 0"):
        validate_config(c, 1)
    c = _tiny(tmp_path)
    c.bc.context_loss_weight = -0.1
    with pytest.raises(ConfigError, match=r"config\.bc\.context_loss_weight: -0\.1 must be >= 0; use 0"):
        validate_config(c, 1)


def test_quick_variant_keeps_fields_set_on_the_command_line():
    from jaxwebrl.config import apply_variants, command_line_fields

    argv = ["--config", "configs/grpo_local.py", "--config.quick=true", "--config.workdir=/tmp/x",
            "--config.bc.steps", "7"]
    explicit = command_line_fields(argv)
    assert explicit == {"quick", "workdir", "bc.steps"}
    c = _load("grpo_local")
    c.quick, c.workdir, c.bc.steps = True, "/tmp/x", 7
    q = apply_variants(c, explicit)
    assert q.workdir == "/tmp/x" and q.bc.steps == 7  # the command line wins
    assert q.bc.demonstration_seeds == c.quick_overrides.bc.demonstration_seeds and q.rl.iterations == 1  # the rest is quick
    assert apply_variants(c).workdir == c.quick_overrides.workdir  # without explicit fields, quick's own


def test_every_entry_point_taking_a_config_applies_its_variants():
    """`--config.local=true`, `--config.quick=true` and `--config.model.pretrained` take effect only through
    `apply_variants`; a script that parses the config without it silently runs the paper's full-scale config
    (scripts/eval.py and compare_policies.py did, until the WebGym local evaluation of 2026-11-30)."""
    takers = [p for d in ("scripts", "studies", "benchmarks", "jaxwebrl") for p in sorted((ROOT / d).rglob("*.py"))
              if "DEFINE_config_file" in p.read_text()]
    assert len(takers) >= 7, takers  # main, eval, compare_policies, nnetnav, train_judge and two studies
    missing = [str(p.relative_to(ROOT)) for p in takers if "apply_variants(" not in p.read_text()]
    assert not missing, f"parse the config through jaxwebrl.config.apply_variants: {missing}"


def test_demonstrated_tasks_default_to_those_with_a_solver_and_bad_names_are_refused():
    from jaxwebrl.main_job.stages import demonstrated_task_ids

    c = _load("grpo_local")
    run_tasks = ["miniwob.click-button", "miniwob.focus-text-2", "miniwob.focus-text"]
    assert demonstrated_task_ids(parse_config(c), run_tasks) == ["miniwob.click-button", "miniwob.focus-text"]  # focus-text-2: no solver
    c.bc.tasks = "focus-text"
    assert demonstrated_task_ids(parse_config(c), run_tasks) == ["miniwob.focus-text"]
    c.bc.tasks = "focus-text-2"
    with pytest.raises(ValueError, match=r"'miniwob.focus-text-2', which has no scripted solver .* drop it from bc.tasks"):
        demonstrated_task_ids(parse_config(c), run_tasks)
    c.bc.tasks = "click-link"
    with pytest.raises(ValueError, match=r"'miniwob.click-link', which is not among the run's tasks \(tasks.train\)"):
        demonstrated_task_ids(parse_config(c), run_tasks)


def test_each_section_names_its_own_bad_field(tmp_path):
    """Sections check their own fields; the composed config adds the section's path to the message."""
    cases = [
        ("env", "remote_endpoints", "http://127.0.0.1:3000", r"config\.env\.remote_endpoints: 'http://127\.0\.0\.1:3000' is not a websocket url"),
        ("rollout", "horizon_schedule", "first:15", r"config\.rollout\.horizon_schedule: .*non-integer iteration"),
        ("tasks", "suite", "webshop", r"config\.tasks\.suite: 'webshop' is not allowed; use one of \(.*'miniwob'"),
        ("engine", "weight_sync", "restart", r"config\.engine\.weight_sync: 'restart' needs engine\.launch=True"),
        ("agent", "strategy", "everything", r"config\.agent: .*everything"),
        ("loss", "kl_estimator", "k9", r"config\.loss: .*k9"),
        ("train", "epochs", 0, r"config\.train\.epochs: 0 must be >= 1"),
        ("bc", "rationale_form", "role", r"config\.bc\.rationale_form: 'role' is not allowed; use one of \('element', 'name'\)"),
    ]
    for section, field, value, message in cases:
        c = _tiny(tmp_path)
        if section == "engine":
            c.engine.type = "sglang"
        c[section][field] = value
        with pytest.raises(ConfigError, match=message):
            parse_config(c)


def test_engine_prefix_cache_fields_are_checked(tmp_path):
    c = _tiny(tmp_path)
    c.engine.page_size = c.engine.max_len * 2
    with pytest.raises(ConfigError, match=r"config\.engine\.page_size: \d+ exceeds max_len=\d+; use a page_size"):
        parse_config(c)
    c = _tiny(tmp_path)
    c.engine.prefix_cache_tokens = 4
    with pytest.raises(ConfigError, match=r"config\.engine\.prefix_cache_tokens: 4 is less than one page"):
        parse_config(c)
    c.engine.prefix_cache = False  # the switch off: the budget no longer matters
    assert parse_config(c).engine.jax_kwargs()["prefix_cache"] is False


def test_wrong_type_is_named(tmp_path):
    c = _tiny(tmp_path)
    c.train = {"seq_len": "long"}  # ml_collections keeps a field's type; a section given whole as a dict may not
    with pytest.raises(ConfigError, match=r"config\.train\.seq_len: 'long' is a str, not a int"):
        parse_config(c)


def test_a_registered_recipe_is_a_choice_without_touching_the_config_code(tmp_path):
    from jaxwebrl.recipes.registry import RECIPES, Recipe, register_recipe

    c = _tiny(tmp_path)
    c.recipe = "my_paper"
    with pytest.raises(ConfigError, match=r"config\.recipe: 'my_paper' is not allowed"):
        parse_config(c)
    register_recipe(Recipe("my_paper", reward="success", filters=("drop_zero_variance",), advantage="group_norm",
                           per="turn", norm="per_turn"))
    try:
        assert parse_config(c).recipe == "my_paper"
    finally:
        del RECIPES["my_paper"]


def test_stage_changes_are_checked_again(tmp_path):
    from jaxwebrl.fields import with_changes

    run = parse_config(_tiny(tmp_path))
    sft = with_changes(run, **{"loss.kind": "sft", "optim.lr": 2e-3, "workdir": "/tmp/x"})
    assert (sft.loss.kind, sft.optim.lr, sft.workdir, run.loss.kind) == ("sft", 2e-3, "/tmp/x", run.loss.kind)
    with pytest.raises(ConfigError, match=r"lr: -1\.0 must be > 0"):
        with_changes(run, **{"optim.lr": -1.0})


def test_deterministic_schedule_is_the_local_default_and_refuses_what_it_cannot_control():
    """rl.schedule='deterministic' (the main job's and the local variants' default) runs the JaxEngine and an
    in-process judge in their deterministic modes, and refuses engines whose batching this process does not
    control, with the field and the fix."""
    from jaxwebrl.config import apply_variants

    main = parse_config(_load("grpo_local"))
    assert main.rl.schedule == "deterministic" and main.engine.deterministic
    local = _load("grpo_openwebrl")
    local.local = True
    local = parse_config(apply_variants(local))
    assert local.rl.schedule == "deterministic" and local.engine.deterministic
    judged = parse_config(_load("grpo_local_judge"))
    assert judged.reward.judge.deterministic
    paper = parse_config(_load("grpo_tpu"))
    assert paper.rl.schedule == "async" and not paper.engine.deterministic
    for field, value, message in [
        ("engine.type", "sglang", r"config.rl.schedule: 'deterministic' needs the in-process JaxEngine"),
        ("rollout.mode", "lockstep", r"config.rollout.mode: 'lockstep' is the benchmarks' lock-step baseline"),
        ("engine.prefill_chunk", 100, r"config.engine.prefill_chunk: 100 with deterministic=True must divide"),
        ("rl.schedule", "by_clock", r"config.rl.schedule: 'by_clock' is not allowed"),
    ]:
        c = _load("grpo_local")
        section, name = field.split(".")
        c[section][name] = value
        with pytest.raises(ConfigError, match=message):
            parse_config(c)
    c = _load("grpo_local_judge")
    c.reward.judge.engine, c.reward.judge.url = "openai", "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match=r"config.reward.judge.engine: 'openai' judges on a server"):
        parse_config(c)
    c.rl.schedule = "async"
    assert not parse_config(c).engine.deterministic  # the throughput mode takes any engine
