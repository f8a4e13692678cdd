"""WebAgent-R1 (Wei et al. 2025): M-GRPO on binary task success, one sample per trajectory.

Reward 1 for success else 0; advantages normalised within each group of G trajectories of the same task
instance; the whole multi-turn trajectory is one sample whose loss is normalised per trajectory
(`norm='webagent_r1'`); the context keeps the full current page and compresses earlier ones
(`agent.strategy='compress_past'`, set by the configs).
"""

from jaxwebrl.recipes.registry import Recipe, register_recipe

RECIPE = register_recipe(Recipe("webagent_r1", reward="success", filters=(), advantage="group_norm",
                                per="trajectory", norm="webagent_r1"))
