"""Convert any training checkpoint to a HuggingFace directory (config.json, safetensors, tokenizer).

  python scripts/export_hf.py --checkpoint runs/sft_synthetic/checkpoints [--step 40] --out /tmp/hf [--dtype bfloat16]

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


def main(argv: list[str]) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)
    from jaxwebrl.train.export import export_checkpoint

    try:
        out = export_checkpoint(_CKPT.value, _OUT.value, _STEP.value, _DTYPE.value, _TOKENIZER.value)
    except FileNotFoundError as exc:
        raise SystemExit(f"--checkpoint: {exc}")
    print(f"exported step to {out}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    app.run(main)
