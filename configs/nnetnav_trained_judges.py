"""NNetNav measured locally with judges trained here (issue 23 item 3): the local variant of
configs/nnetnav_explore.py on the main job's twelve MiniWoB++ tasks (six have no scripted solver: there NNetNav
is the only source of data), with

- the summariser by rule (`summarizer='page_diff'`, jaxwebrl/nnetnav/summary.py),
- the labeler trained here (`labeler_path`: configs/labeler_local.py -> runs/labeler_local/labeler_hf),
- the ORM = the verifier trained here (`judge.kind='verifier'`: configs/judge_local.py -> runs/judge_local/judge_hf;
  SUCCESS accepts the prefix),
- the main job's BC policy exploring at a high temperature on training seeds after BC's demonstrations, and the
  explored actions kept as the SFT targets (`relabel_actions='explored'`: the BC policy is too weak to re-write
  them) without an appended stop turn (MiniWoB++ pages end their episodes).

    python scripts/nnetnav.py --config configs/nnetnav_trained_judges.py \
        --config.engine.checkpoint=runs/grpo_local/bc/hf --config.model.path=runs/grpo_local/bc/hf

Then SFT on demonstrations + the output vs demonstrations alone (configs/sft_nnetnav.py --config.local=true,
the same steps and seed) and a greedy evaluation on held-out seeds (scripts/compare_policies.py); RESULTS.md
has the commands and the result.
"""

from jaxwebrl.config import sibling_config, sibling_module


def get_config():
    c = sibling_config(__file__, "nnetnav_explore")
    c.local = True
    lo = c.local_overrides
    lo.workdir = "runs/nnetnav_trained_judges"
    lo.tasks.train = sibling_module(__file__, "grpo_local").TASKS
    lo.env.text_budget_chars = 1200  # the main job's observation settings (the BC policy reads these)
    lo.env.contexts_per_browser = 8
    lo.agent.max_steps = 6
    n = lo.nnetnav
    # training seeds after the 100 the BC demonstrations used; a high temperature for varied explorations
    n.seeds, n.temperature, n.max_steps, n.concurrency = "100:140", 1.3, 8, 8
    n.judge_uses_policy, n.summarizer = False, "page_diff"
    n.labeler_path = "runs/labeler_local/labeler_hf"
    n.relabel_actions, n.append_stop, n.best_of_k = "explored", False, 1
    n.judge_max_new_tokens, n.judge_timeout_s = 48, 120.0  # the labeler's "Instruction: <utterance>"
    n.judge = dict(kind="verifier", engine="jax", model_path="runs/judge_local/judge_hf", jax_max_len=2048,
                   jax_num_slots=4, concurrency=4, retries=0)
    return c
