#!/usr/bin/env bash
# Prepare the virtual environment that runs BrowserGym's MiniWoB++ environment (browsergym-miniwob) beside
# jaxwebrl, for the consistency test (tests/test_miniwob_browsergym.py) and the AgentLab agent
# (jaxwebrl/interop/agentlab.py). browsergym-core 0.14.x pins playwright==1.44.0 while jaxwebrl needs
# playwright>=1.65, so BrowserGym lives in its own venv, by default <repo>/.venv-browsergym
# (override: BROWSERGYM_VENV=/path). It uses the system Chromium (CHROMIUM=/usr/bin/chromium) and never
# downloads one: BrowserGym also launches a chat window with Playwright's default browser, so the venv gets
# a Playwright browsers folder, <venv>/ms-playwright/chromium-<revision>/chrome-linux/chrome, linking to the
# system Chromium; point PLAYWRIGHT_BROWSERS_PATH at it (jaxwebrl/interop/browsergym_miniwob_runner.py does).
#
# `--with-jaxwebrl` also installs browsergym-experiments (the harness AgentLab runs) and jaxwebrl's model /
# engine dependencies (not playwright: BrowserGym's 1.44 stays), for jaxwebrl/interop/agentlab.py with
# jaxwebrl on PYTHONPATH.
#
# Idempotent and fast on a second run: creates the venv only if missing and installs only if the
# import check fails.
#
# Exit codes: 0 ready; 3 no Python 3.10-3.12 found (set BROWSERGYM_PYTHON=/path/to/python);
# 4 pip install failed; 5 installed but `import browsergym.miniwob` still fails; 6 no Chromium at $CHROMIUM.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BROWSERGYM_VENV:-$REPO/.venv-browsergym}"
BROWSERGYM_VERSION="${BROWSERGYM_VERSION:-0.14.3}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
CHECK="import browsergym.miniwob, browsergym.core, playwright.sync_api"
PACKAGES=("browsergym-miniwob==$BROWSERGYM_VERSION")
if [ "${1:-}" = "--with-jaxwebrl" ]; then
    CHECK="$CHECK, browsergym.experiments, jax, flax, optax, transformers, tokenizers, safetensors, httpx, jinja2, gguf"
    # jaxwebrl's runtime dependencies that its agent / engine code imports (pyproject.toml), minus playwright.
    PACKAGES+=("browsergym-experiments==$BROWSERGYM_VERSION" "playwright==1.44.0" "jax>=0.10.2" "flax>=0.12.8"
               "optax>=0.2.8" "transformers>=5.23" "tokenizers>=0.23" "safetensors>=0.8" "ml-dtypes>=0.6"
               "httpx>=0.28" "ml-collections>=1.1" "absl-py>=2.1" "jinja2>=3.1" "gguf>=0.19")
fi

if [ ! -x "$CHROMIUM" ]; then
    echo "setup_browsergym_env: no Chromium at $CHROMIUM (apt-get install chromium, or set CHROMIUM=...)" >&2
    exit 6
fi

# Playwright's browsers folder inside the venv, its chromium entry linking to the system Chromium.
link_chromium() {
    local rev
    rev="$("$VENV/bin/python" -c 'import json, pathlib, playwright
p = pathlib.Path(playwright.__file__).parent / "driver/package/browsers.json"
print(next(b["revision"] for b in json.loads(p.read_text())["browsers"] if b["name"] == "chromium"))')"
    mkdir -p "$VENV/ms-playwright/chromium-$rev/chrome-linux"
    ln -sfn "$CHROMIUM" "$VENV/ms-playwright/chromium-$rev/chrome-linux/chrome"
}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
    [ -n "$(ls "$VENV"/ms-playwright/chromium-*/chrome-linux/chrome 2>/dev/null)" ] || link_chromium
    echo "browsergym venv ready: $VENV/bin/python"
    exit 0
fi

source "$REPO/scripts/find_python.sh"

if [ ! -x "$VENV/bin/python" ]; then
    if ! PY="$(find_python 3.10 3.12 "${BROWSERGYM_PYTHON:-}" /root/.pyenv/versions/3.12*/bin/python \
            /root/.pyenv/versions/3.11*/bin/python "$HOME"/.pyenv/versions/3.12*/bin/python python3.12 python3.11)"; then
        echo "setup_browsergym_env: no Python 3.10-3.12 found; browsergym-core needs one." >&2
        echo "  Install one (e.g. 'pyenv install 3.12') and rerun, or set BROWSERGYM_PYTHON=/path/to/python." >&2
        exit 3
    fi
    echo "creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi

echo "installing ${PACKAGES[*]} into $VENV"
if ! "$VENV/bin/pip" install --quiet "${PACKAGES[@]}"; then
    echo "setup_browsergym_env: pip install failed (see above)" >&2
    exit 4
fi
if ! "$VENV/bin/python" -c "$CHECK"; then
    echo "setup_browsergym_env: browsergym-miniwob installed but does not import" >&2
    exit 5
fi
link_chromium
echo "browsergym venv ready: $VENV/bin/python"
