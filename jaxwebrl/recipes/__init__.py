"""The papers' recipes: one module each (webagent_r1, openwebrl, webgym, browseragent, demonstrations_only),
registered in `registry` and loaded by `papers`; `config` (the `reward` section) and `local` (each paper
config's laptop-scale variant). The main job that runs them is `jaxwebrl.main_job`."""
