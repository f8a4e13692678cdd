"""NNetNav's pipeline (papers/nnetnav.txt §3): demonstrations without demonstrators. `pipeline` runs it from a
run config (explore -> relabel -> report); `explore` plays and prunes exploration episodes; `relabel`
rewrites what was kept in the run's own prompts; `summary` (state changes by rule), `prompts`, `politeness`
and `config` (the `nnetnav` section) serve them."""
