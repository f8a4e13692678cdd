"""NNetNav (papers/nnetnav.txt §3): demonstrations without demonstrators. The pipeline (`pipeline.run_pipeline`,
scripts/nnetnav.py) runs its stages from a run config:

1. **Explore** (`explore`): the policy engine at temperature plays episodes through the same browser pool and
   episode loop as RL (`agent.episode.run_episode`), its task line a persona sampled from an editable file
   (`prompts`). The env is wrapped by `ExplorationEnv`, which after every action asks the summariser for
   Delta(o_t, a_t, o_t+1) and at t in {4, 8, ..., t_max} (and, optionally, when the episode ends) labels the
   prefix (summaries -> instruction) and scores it with the ORM (1..5, pass >= 4). A rejected prefix ends the
   episode (pruning); an accepted one is written to `demonstrations.jsonl` at once (`store`) and exploration
   goes on (nested demonstrations). A labeler / ORM / summariser failure (garbage, timeout, dead server) drops
   that prefix with its reason in `dropped.jsonl`; the episode goes on. Politeness limits hold per origin
   (`politeness`).
2. **Relabel** (`relabel`): for every stored (instruction, prefix) the agent's own prompt (the run's prompt
   format and context strategy, the instruction as the task) regenerates each step's response (reasoning +
   action) with the policy engine, and a final `stop [answer]` turn is appended (the answer from the stop
   prompt). Optional best-of-K: K-1 more agent episodes on the instruction, all scored by the ORM, the best
   kept. The output is per-step SFT data (`Trajectory` records: prompt ids -> response ids) with the
   instruction, persona, ORM score and pruning step in metadata.
3. **Report** (`explore.exploration_report`): explorations, prefixes labelled / accepted / rejected / dropped,
   demonstrations per episode.

Every component is a prompt + an Engine call (`judges.NNetNavJudges`), so it runs with one model (the paper)
or separate ones, in process (JaxEngine) or on servers (SGLang, OpenAI-compatible); the summariser may also be
the rule of `summary`, and `config` is the run config's `nnetnav` section.
"""
