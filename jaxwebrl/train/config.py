"""The `train` config section: batch geometry, PPO epochs, where old logprobs come from, advantage scaling."""

from __future__ import annotations

import dataclasses

from jaxwebrl.fields import FieldError, at_least, one_of

OLD_LOGPROBS = ("engine", "recompute")  # from the rollout's sampler | the trainer's forward, once per batch


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 100  # optimizer steps (SFT) / rollout batches (GRPO from records)
    seq_len: int = 256
    micro_batch: int = 8  # rows per micro-batch (global); divisible by data x fsdp
    accum_steps: int = 1  # micro-batches per optimizer step
    epochs: int = 1  # PPO epochs over one rollout batch
    groups_per_step: int = 4  # GRPO from records: task groups per rollout batch
    old_logprobs: str = "engine"
    logits_chunk: int = 0  # compute logprobs in length chunks of this size (0 = all at once)
    scale_adv_by_std: bool = True
    adv_eps: float = 1e-6
    dynamic_sampling: bool = False  # drop zero-variance groups (DAPO / OpenWebRL)
    freeze_vision: bool = False  # vision-language policies: the vision encoder gets no gradient and no update
    # Text policies: train only the top N decoder layers and the final norm; the embedding and the layers below
    # get no gradient and no update, and the backward pass stops at layer N from the top (0 = train everything).
    trainable_layers: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "seq_len", "micro_batch", "accum_steps", "epochs", "groups_per_step"):
            value = getattr(self, name)
            if int(value) < 1:
                raise FieldError(name, f"{value} must be >= 1", "set a positive integer")
        one_of("old_logprobs", self.old_logprobs, OLD_LOGPROBS)
        if not isinstance(self.freeze_vision, bool):
            raise FieldError("freeze_vision", f"{self.freeze_vision!r} is not a bool", "set True or False")
        at_least("logits_chunk", self.logits_chunk, 0)
        at_least("trainable_layers", self.trainable_layers, 0)
        if self.logits_chunk and self.seq_len % self.logits_chunk:
            raise FieldError("logits_chunk", f"{self.logits_chunk} does not divide train.seq_len={self.seq_len}",
                             "use a divisor of seq_len, or 0")

    @property
    def rows(self) -> int:
        """Rows per optimizer step (all micro-batches)."""
        return self.accum_steps * self.micro_batch
