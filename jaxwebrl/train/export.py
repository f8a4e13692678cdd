"""Any training checkpoint -> a HuggingFace directory, reading only the params (never the optimizer state).

The model config and tokenizer dir come from the checkpoint's `meta` item, so no training config is needed.
"""

from __future__ import annotations

import os

from jaxwebrl.models import abstract_params
from jaxwebrl.models import vl
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_or_text import export_policy_hf
from jaxwebrl.train.checkpoint import Checkpointer, model_config_from_json


def export_checkpoint(checkpoint: str, out: str, step: int | None = None, dtype: str | None = None,
                      tokenizer: str | None = None) -> str:
    """Export step `step` (default: the latest) of the Orbax checkpoint dir `checkpoint` to `out`."""
    ck = Checkpointer(checkpoint, async_save=False)
    try:
        step = ck.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{checkpoint}: no checkpoint steps found there; pass the directory holding "
                                    "the numbered step folders")
        meta = ck.read_meta(step)
        cfg = model_config_from_json(meta["model"])
        params = ck.restore_params(vl.abstract_params(cfg) if isinstance(cfg, VLConfig) else abstract_params(cfg), step)
        tok = tokenizer or meta.get("tokenizer_dir")
        export_policy_hf(cfg, params, out, tokenizer_dir=tok if tok and os.path.isdir(tok) else None, dtype=dtype)
    finally:
        ck.close()
    return out
