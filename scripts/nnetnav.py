"""NNetNav: explore -> relabel -> report, from a config file (configs/nnetnav_explore.py).

    python scripts/nnetnav.py --config configs/nnetnav_explore.py [--stages explore,relabel]
    python scripts/nnetnav.py --config configs/nnetnav_explore.py --config.local=true --config.nnetnav.seeds=0:10
    python scripts/nnetnav.py --config configs/nnetnav_explore.py --config.local=true --config.model.pretrained=smollm2

The config is a run config whose `nnetnav` section (jaxwebrl/nnetnav/config.py NNetNavConfig) holds
the pipeline's settings; its local / quick variants overlay it like any other section. With
`model.pretrained` (a model the package index ships, e.g. SmolLM2-135M-Instruct) that model, fetched and
converted on first use, is the explorer, relabeler and (local variant) judge in place of the main job's BC
policy, unless the command line names `engine.checkpoint` itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from typing import Any, Collection

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import ConfigDict, config_flags  # noqa: E402

from jaxwebrl.config import apply_variants, command_line_fields, parse_config, resolve_pretrained  # noqa: E402
from jaxwebrl.nnetnav.config import NNetNavConfig  # noqa: E402
from jaxwebrl.nnetnav.pipeline import run_pipeline  # noqa: E402

def split_config(cfg: ConfigDict, explicit: Collection[str] = ()) -> tuple[Any, NNetNavConfig]:
    """(RunConfig, its `nnetnav` section) with the local / quick variants applied; command-line fields win. A
    `model.pretrained` policy is fetched (first use) and becomes the engine's checkpoint."""
    run = parse_config(apply_variants(cfg, explicit))
    if run.model.pretrained and "engine.checkpoint" not in explicit:
        run = resolve_pretrained(run)
        run = dataclasses.replace(run, engine=dataclasses.replace(run.engine, checkpoint=run.model.path))
    return run, run.nnetnav


def main() -> None:
    config = config_flags.DEFINE_config_file("config", "configs/nnetnav_explore.py", "NNetNav config file.",
                                             lock_config=False)
    stages = flags.DEFINE_string("stages", "explore,relabel", "Comma-separated stages to run.")

    def _main(argv: list[str]) -> None:
        del argv
        run, nn = split_config(config.value, command_line_fields(sys.argv[1:]))
        report = asyncio.run(run_pipeline(run, nn, stages=[s for s in stages.value.split(",") if s]))
        print("NNETNAV_REPORT " + json.dumps(report))

    app.run(_main)


if __name__ == "__main__":
    main()
