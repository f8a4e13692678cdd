"""NNetNav exploration + relabeling (papers/nnetnav.txt): persona-conditioned exploration, state-change
summaries, hindsight labels, ORM pruning every 4 steps up to 40, relabeling with the agent prompt, best-of-3.

    python scripts/nnetnav.py --config configs/nnetnav_explore.py                     # paper scale (servers)
    python scripts/nnetnav.py --config configs/nnetnav_explore.py --config.local=true  # MiniWoB++ on CPU

Paper scale: a Llama-3.1-8B explorer / relabeler on SGLang servers and a Llama-3.1-70B judge (summariser,
labeler, ORM) behind an OpenAI-compatible URL, WebArena-style actions in BrowserAgent's response format
(reasoning, then one action in a ``` fence), live-site politeness 10 instances per origin, 0.5 s between
actions. The output (`<workdir>/nnetnav/nnetnav_sft.jsonl`) trains with configs/sft_nnetnav.py.
The local variant explores MiniWoB++ with the main job's BC policy (configs/grpo_local.py -> runs/grpo_local/
bc/hf) at temperature 1, the same model as judge, T_max 20 (the paper's MiniWoB++ horizon).
"""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import LOCAL_TASKS, local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "nnetnav"
    c.workdir = "runs/nnetnav_explore"
    c.model.source = "hf"
    c.model.path = "checkpoints/Llama-3.1-8B-Instruct"
    c.engine.type = "sglang"
    c.engine.checkpoint = "checkpoints/Llama-3.1-8B-Instruct"
    c.engine.launch = True
    c.tasks.suite = "local_sites"
    c.env.action_space = "webarena"
    c.env.text_mode = "axtree"
    c.agent.prompt_format = "browseragent"
    c.agent.strategy = "current_plus_history"  # (instruction, current observation, previous actions)
    c.agent.max_new_tokens = 512
    c.agent.max_context_tokens = 20000  # the paper truncates SFT sequences at 20k
    n = c.nnetnav
    n.personas_file, n.seeds = "envs/personas/sites.txt", "0:50"  # 50 episodes per website
    n.max_steps, n.prune_every, n.label_at_end, n.pass_score, n.temperature = 40, 4, True, 4, 1.0
    n.explore_prompt, n.show_summaries, n.concurrency = True, True, 10
    n.max_instances_per_origin, n.min_action_interval_s = 10, 0.5
    n.relabel_temperature, n.best_of_k, n.judge_uses_policy = 0.0, 3, False
    n.judge_timeout_s, n.judge_max_new_tokens = 120.0, 512
    n.judge.kind, n.judge.engine, n.judge.url = "nnetnav_orm", "openai", "http://127.0.0.1:30001"
    n.judge.model_name, n.judge.concurrency, n.judge.retries = "Llama-3.1-70B-Instruct", 16, 1

    # Local variant: MiniWoB++ with the main job's BC policy as explorer, relabeler and judge (one model).
    c.local_overrides = local_overrides(
        "nnetnav_explore", model=dict(source="hf", path="runs/grpo_local/bc/hf"),
        engine=dict(checkpoint="runs/grpo_local/bc/hf"), tasks=dict(train=LOCAL_TASKS),
        env=dict(action_space="bid"),
        agent=dict(prompt_format="bid", strategy="compress_past", max_new_tokens=24, max_context_tokens=2048,
                   system_prompt="You are a web agent. Answer with exactly one action, e.g. click('12')"),
        nnetnav=dict(personas_file="envs/personas/miniwob.txt", seeds="0:80", max_steps=20, explore_prompt=False,
                     show_summaries=False, concurrency=8, min_action_interval_s=0.0, best_of_k=1,
                     judge_uses_policy=True, judge_max_new_tokens=64, judge_timeout_s=60.0))
    c.quick_overrides = quick_overrides("nnetnav_explore", tasks=dict(train="click-button,focus-text"),
                                        nnetnav=dict(seeds="0:2", max_steps=8, judge_max_new_tokens=16))
    return c
