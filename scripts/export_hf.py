"""Convert any training checkpoint to a HuggingFace directory (config.json, safetensors, tokenizer).

  python scripts/export_hf.py --checkpoint runs/sft_demo/checkpoints [--step 40] --out /tmp/hf [--dtype bfloat16]

The model config and tokenizer dir are read from the checkpoint's `meta` item, so no training config is
needed; only the params are restored (a partial restore: optimizer state is never read).
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

_CKPT = flags.DEFINE_string("checkpoint", None, "Checkpoint directory (the one holding step subdirectories).", required=True)
_STEP = flags.DEFINE_integer("step", None, "Step to export (default: latest).")
_OUT = flags.DEFINE_string("out", None, "Output HuggingFace directory.", required=True)
_DTYPE = flags.DEFINE_string("dtype", None, "Tensor dtype in the export (default: the params' dtype).")
_TOKENIZER = flags.DEFINE_string("tokenizer", None, "Tokenizer dir to copy (default: the one recorded in the checkpoint).")


def export(checkpoint: str, out: str, step: int | None = None, dtype: str | None = None, tokenizer: str | None = None) -> str:
    from jaxwebrl.models import abstract_params, export_hf
    from jaxwebrl.train.checkpoint import Checkpointer, model_config_from_json

    ck = Checkpointer(checkpoint, async_save=False)
    step = ck.latest_step() if step is None else step
    if step is None:
        raise SystemExit(f"--checkpoint {checkpoint}: no checkpoint steps found there")
    meta = ck.read_meta(step)
    cfg = model_config_from_json(meta["model"])
    params = ck.restore_params(abstract_params(cfg), step)
    tok = tokenizer or meta.get("tokenizer_dir")
    export_hf(cfg, params, out, tokenizer_dir=tok if tok and os.path.isdir(tok) else None, dtype=dtype)
    ck.close()
    return out


def main(argv: list[str]) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)
    out = export(_CKPT.value, _OUT.value, _STEP.value, _DTYPE.value, _TOKENIZER.value)
    print(f"exported step to {out}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    app.run(main)
