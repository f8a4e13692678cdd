"""The papers' recipes (one module each, registered in `registry`), the online RL source, the main job's
stages, greedy evaluation and the run report."""
