"""`python -m jaxwebrl --config configs/X.py [--config.field=value ...] [--dry_run]` (see jaxwebrl.main)."""

from jaxwebrl.main import cli

cli()
