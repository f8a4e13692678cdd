"""The training entry point as a script (same as `python -m jaxwebrl`; see jaxwebrl/main.py).

  python scripts/train.py --config configs/grpo_local.py [--config.quick=true]
  python scripts/train.py --config configs/sft_synthetic.py --config.optim.lr=1e-3
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python scripts/train.py --config configs/grpo_tpu.py --dry_run
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from jaxwebrl.main import cli

    cli()
