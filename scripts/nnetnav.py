"""NNetNav: explore -> relabel -> report, from a config file (configs/nnetnav_explore.py).

    python scripts/nnetnav.py --config configs/nnetnav_explore.py [--stages explore,relabel]
    python scripts/nnetnav.py --config configs/nnetnav_explore.py --config.local=true --config.nnetnav.seeds=0:10

The config is a run config plus an `nnetnav` section (jaxwebrl/recipes/nnetnav_config.py NNetNavConfig) and
its local / quick overlays (`nnetnav_local`, `nnetnav_quick`). Until the section is composed into
jaxwebrl.config, this script splits it off before the run config is parsed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, Collection

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import ConfigDict, config_flags  # noqa: E402

from jaxwebrl.config import apply_variants, command_line_fields, parse_config  # noqa: E402
from jaxwebrl.recipes.nnetnav_config import NNetNavConfig  # noqa: E402
from jaxwebrl.recipes.nnetnav_run import nnetnav_section, run_pipeline  # noqa: E402

SECTION_KEYS = ("nnetnav", "nnetnav_local", "nnetnav_quick")


def split_config(cfg: ConfigDict, explicit: Collection[str] = ()) -> tuple[Any, NNetNavConfig]:
    """(RunConfig, NNetNavConfig) with the local / quick overlays applied; command-line fields win."""
    d = cfg.to_dict()
    nn, local, quick = (d.pop(k, None) or {} for k in SECTION_KEYS)
    run = parse_config(apply_variants(ConfigDict(d), explicit))
    for on, overlay in ((d.get("local"), local), (d.get("quick"), quick)):
        if on:
            nn.update({k: v for k, v in overlay.items() if f"nnetnav.{k}" not in explicit})
    return run, nnetnav_section(nn)


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
