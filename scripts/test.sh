#!/usr/bin/env bash
# The project's tests, one command: cargo test --workspace, then the Python tests (tests/python:
# the GPU measurement script's CPU dry run and the cases made from it).
#
# Python: the interpreter named by VRAMSCOPE_PYTHON when set (it must import torch,
# transformers, peft, accelerate and pytest); else .venv-test/ at the repository root, created
# on first use with those packages from PyPI (the versions the tests were written against; about
# 3 GB, since PyPI's torch wheel brings the CUDA runtime). pip keeps no cache outside it.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_PACKAGES=(torch==2.15.0 transformers==5.24.0 peft==0.21.2 accelerate==1.15.0 pytest==9.2.0)
VENV=.venv-test

cargo test --workspace --locked

has_packages() {
  "$1" -c 'import torch, transformers, peft, accelerate, pytest' >/dev/null 2>&1
}

if [ -n "${VRAMSCOPE_PYTHON:-}" ]; then
  py="$VRAMSCOPE_PYTHON"
  if ! has_packages "$py"; then
    echo "VRAMSCOPE_PYTHON=$py cannot import torch, transformers, peft, accelerate and pytest" >&2
    exit 2
  fi
else
  py="$VENV/bin/python"
  if [ ! -f "$VENV/.complete" ] || ! has_packages "$py"; then
    echo "scripts/test.sh: creating $VENV (${PY_PACKAGES[*]})" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
      "$py" -m pip install --quiet "${PY_PACKAGES[@]}"
    touch "$VENV/.complete"
  fi
fi

VRAMSCOPE_BIN="${CARGO_TARGET_DIR:-target}/debug/vramscope" "$py" -m pytest -q tests/python
