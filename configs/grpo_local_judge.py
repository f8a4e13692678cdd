"""The main job with RL rewarded by the judge trained here, never by the rule evaluator (issue 21 item 5):
a config overlay on configs/grpo_local.py, no code fork. Behaviour cloning and the held-out evaluation (the
report) still use the rule evaluator; every RL episode is judged by the verifier as it ends
(`reward.source='judge'`, `reward.judge.kind='verifier'` on the in-process JaxEngine), and a judge failure
masks the episode.

    python scripts/train_judge.py --config configs/judge_local.py       # -> runs/judge_local/judge_hf
    python scripts/train.py --config configs/grpo_local_judge.py [--config.quick=true]
"""

from jaxwebrl.config import sibling_config


def get_config():
    c = sibling_config(__file__, "grpo_local")
    c.workdir = "runs/grpo_local_judge"
    c.reward.source = "judge"
    j = c.reward.judge
    j.kind, j.engine, j.model_path = "verifier", "jax", "runs/judge_local/judge_hf"
    j.max_new_tokens = 16  # "NOT SUCCESS" + EOS in the judge's own tokenizer
    j.jax_max_len, j.jax_num_slots = 2048, 4
    j.concurrency, j.queue_concurrency = 4, 8
    j.timeout_s, j.retries = 60.0, 0
    q = c.quick_overrides
    q.workdir = "runs/grpo_local_judge_quick"
    q.reward = dict(source="judge")  # grpo_local's smoke variant uses MiniWoB's raw reward: here the judge's
    return c
