#!/usr/bin/env bash
# Prepare the Python >= 3.12 virtual environment that runs the sglang-jax server (module sgl_jax) on CPU/TPU.
# sglang-jax needs Python >= 3.12 while the project runs on 3.11, so it lives in its own venv, by default
# <repo>/.venv-sglang (override: SGLANG_VENV=/path). Idempotent: creates the venv only if missing and
# installs only if `import sgl_jax` fails.
#
# Exit codes: 0 ready; 3 no Python >= 3.12 found (set PYTHON312=/path/to/python3.12); 4 pip install failed;
# 5 installed but `import sgl_jax` still fails.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SGLANG_VENV:-$REPO/.venv-sglang}"
SGLANG_JAX_VERSION="${SGLANG_JAX_VERSION:-0.1.0rc0}"
JAX_VERSION="${SGLANG_JAX_JAX_VERSION:-0.10.2}"   # sglang-jax pins flax 0.12.4, which a newer jax breaks

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import sgl_jax" >/dev/null 2>&1; then
    echo "sglang-jax venv ready: $VENV/bin/python"
    exit 0
fi

source "$REPO/scripts/find_python.sh"

if [ ! -x "$VENV/bin/python" ]; then
    if ! PY="$(find_python 3.12 3.99 "${PYTHON312:-}" python3.13 python3.12 \
            /root/.pyenv/versions/3.12*/bin/python "$HOME"/.pyenv/versions/3.12*/bin/python /usr/bin/python3.12)"; then
        echo "setup_sglang_env: no Python >= 3.12 found; sglang-jax needs it." >&2
        echo "  Install one (e.g. 'pyenv install 3.12' or 'apt-get install python3.12-venv') and rerun," >&2
        echo "  or point PYTHON312=/path/to/python3.12 at it. The SGLang tests skip without it." >&2
        exit 3
    fi
    echo "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi

echo "installing sglang-jax==$SGLANG_JAX_VERSION and jax[cpu]==$JAX_VERSION into $VENV"
if ! "$VENV/bin/pip" install --quiet "sglang-jax==$SGLANG_JAX_VERSION" \
   || ! "$VENV/bin/pip" install --quiet "jax[cpu]==$JAX_VERSION"; then
    echo "setup_sglang_env: pip install failed (see above)" >&2
    exit 4
fi
if ! "$VENV/bin/python" -c "import sgl_jax"; then
    echo "setup_sglang_env: sgl_jax installed but does not import" >&2
    exit 5
fi
echo "sglang-jax venv ready: $VENV/bin/python"
