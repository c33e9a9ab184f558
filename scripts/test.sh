#!/usr/bin/env bash
# The project's tests, one command: cargo test --workspace, then the Python tests (tests/python:
# the `vramscope` Python package — API, recorder, trainer callbacks, job_from — and the GPU
# measurement script's CPU dry run and the cases made from it).
#
# Python: the interpreter named by VRAMSCOPE_PYTHON when set (it must import torch,
# transformers, peft, accelerate, lightning and pytest); else .venv-test/ at the repository
# root, created on first use with those packages from PyPI (the versions the tests were written
# against; about 3 GB, since PyPI's torch wheel brings the CUDA runtime) and topped up when one
# is missing. pip keeps no cache outside it.
#
# The package is then built from this checkout and installed into that interpreter on every
# run (`pip install .`: maturin, fetched by pip's build isolation, builds the wheel through
# cargo, which rebuilds only what changed; the dev profile shares target/debug with the Rust
# tests). VRAMSCOPE_WHEEL_PROFILE=release builds it as users get it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PACKAGES=(torch==2.15.0 transformers==5.24.0 peft==0.21.2 accelerate==1.15.0 pytest==9.2.0
  lightning==2.6.6)
VENV=.venv-test
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

cargo test --workspace --locked

has_packages() {
  "$1" -c 'import torch, transformers, peft, accelerate, lightning, pytest' >/dev/null 2>&1
}

if [ -n "${VRAMSCOPE_PYTHON:-}" ]; then
  py="$VRAMSCOPE_PYTHON"
  if ! has_packages "$py"; then
    echo "VRAMSCOPE_PYTHON=$py cannot import torch, transformers, peft, accelerate, lightning and pytest" >&2
    exit 2
  fi
else
  py="$VENV/bin/python"
  if [ ! -x "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$VENV/.complete" ] || ! has_packages "$py"; then
    echo "scripts/test.sh: installing into $VENV: ${PY_PACKAGES[*]}" >&2
    "$py" -m pip install --quiet --no-compile "${PY_PACKAGES[@]}"
    touch "$VENV/.complete"
  fi
fi

# The wheel of this checkout (crates/python + python/vramscope), installed over any older one.
profile="${VRAMSCOPE_WHEEL_PROFILE:-dev}"
MATURIN_PEP517_ARGS="--profile $profile" \
  "$py" -m pip install --quiet --force-reinstall --no-deps .

VRAMSCOPE_BIN="${CARGO_TARGET_DIR:-target}/debug/vramscope" "$py" -m pytest -q tests/python
