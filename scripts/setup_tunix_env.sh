#!/usr/bin/env bash
# Prepare the virtual environment that runs Tunix (google-tunix), the peer that benchmarks/bench_grpo.py
# measures our GRPO step against. Tunix brings its own dependencies (tensorflow-datasets, qwix, ...) that
# jaxwebrl does not need, so it lives in its own venv, by default <repo>/.venv-tunix (git-ignored;
# override: TUNIX_VENV=/path), with the same jax / flax / optax / orbax versions as jaxwebrl so both sides
# of the benchmark run the same XLA.
#
# Idempotent and fast on a second run: creates the venv only if missing and installs only if the import
# check fails.
#
# Exit codes: 0 ready; 3 no Python 3.11-3.13 found (set TUNIX_PYTHON_BASE=/path/to/python3.11);
# 4 pip install failed; 5 installed but `import tunix` still fails.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TUNIX_VENV:-$REPO/.venv-tunix}"
TUNIX_VERSION="${TUNIX_VERSION:-}"   # empty: the newest google-tunix (0.1.7 when the benchmark was last run)
PACKAGES=(jax==0.10.2 flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 "google-tunix${TUNIX_VERSION:+==$TUNIX_VERSION}")
CHECK="import jax, flax, optax, tunix; from tunix.rl.grpo import grpo_learner; from tunix.models.qwen3 import model"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
    echo "tunix venv ready: $VENV/bin/python"
    exit 0
fi

source "$REPO/scripts/find_python.sh"

if [ ! -x "$VENV/bin/python" ]; then
    if ! PY="$(find_python 3.11 3.13 "${TUNIX_PYTHON_BASE:-}" python3.11 python3 python3.12 \
            /root/.pyenv/versions/3.11*/bin/python "$HOME"/.pyenv/versions/3.11*/bin/python)"; then
        echo "setup_tunix_env: no Python 3.11-3.13 found; jax 0.10.2 and google-tunix need one." >&2
        echo "  Install one and rerun, or set TUNIX_PYTHON_BASE=/path/to/python3.11." >&2
        exit 3
    fi
    echo "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi

echo "installing ${PACKAGES[*]} into $VENV (a few minutes)"
if ! "$VENV/bin/pip" install --quiet "${PACKAGES[@]}"; then
    echo "setup_tunix_env: pip install failed (see above)" >&2
    exit 4
fi
if ! "$VENV/bin/python" -c "$CHECK"; then
    echo "setup_tunix_env: google-tunix installed but does not import" >&2
    exit 5
fi
echo "tunix venv ready: $VENV/bin/python ($("$VENV/bin/python" -c 'import importlib.metadata as m; print("google-tunix", m.version("google-tunix"))'))"
