"""The papers' recipes as compositions, the online RL loop and greedy evaluation."""

from jaxwebrl.recipes.evaluate import EvalReport, evaluate, wilson_interval
from jaxwebrl.recipes.recipes import RECIPES, OnlineRecipe, get_recipe, group_filter, make_samples

__all__ = ["EvalReport", "evaluate", "wilson_interval", "RECIPES", "OnlineRecipe", "get_recipe", "group_filter", "make_samples"]
