"""The `data` config section: what a run trains on and how trajectories become samples.

`kind`: `sft` (demonstration trajectories, weight 1), `trajectories` (saved rewarded rollouts, trained in
rollout batches of whole groups), `online` (rollouts collected by the run itself: browsers + engine).
Without `train_files`, an offline run trains on a synthetic toy set written with the model's tokenizer
(`synthetic=True`), so a config runs with nothing but itself.
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.data.pipeline import PACK_MODES
from jaxwebrl.data.samples import NORM_MODES, SAMPLE_MODES
from jaxwebrl.fields import at_least, comma_list, one_of

KINDS = ("sft", "trajectories", "online")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    kind: str = "sft"  # sft | trajectories | online
    train_files: str = ""  # comma-separated .jsonl / .array_record trajectory files
    synthetic: bool = True  # no files: write a synthetic toy set with the model's tokenizer into the workdir
    synthetic_records: int = 64
    per: str = "turn"  # turn | trajectory (how trajectories become samples)
    norm: str = "token_mean"  # jaxwebrl.data.samples.NORM_MODES
    mode: str = "pack"  # pack | pad
    shuffle: bool = True

    def __post_init__(self) -> None:
        one_of("kind", self.kind, KINDS)
        one_of("per", self.per, SAMPLE_MODES)
        one_of("norm", self.norm, NORM_MODES)
        one_of("mode", self.mode, PACK_MODES)
        at_least("synthetic_records", self.synthetic_records, 1)

    @property
    def files(self) -> list[str]:
        return comma_list(self.train_files)
