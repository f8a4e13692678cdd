"""Recipes that train on demonstration files only: plain SFT, and NNetNav (SFT on relabelled explorations).

They have no online RL loop; given saved rollouts instead, they keep each record's own advantage.
"""

from jaxwebrl.recipes.registry import Recipe, register_recipe

SFT = register_recipe(Recipe("sft", reward="success", filters=(), advantage="given", per="turn",
                             norm="token_mean", online=False))
NNETNAV = register_recipe(Recipe("nnetnav", reward="success", filters=(), advantage="given", per="turn",
                                 norm="token_mean", online=False))
