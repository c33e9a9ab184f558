#!/usr/bin/env bash
# The wheel as a user installs it (issue 31): built from this checkout, installed into a bare
# venv (nothing but pip: no torch, no typing_extensions), where the `vramscope` command and one
# API call must run. The tests' venv has torch and everything it brings, so an import the
# package does not declare passes every other test; here it fails. Declared dependencies are
# fetched as `pip install` fetches them.
#
# Usage: scripts/bare_venv_check.sh [PYTHON]   (PYTHON builds the wheel: pip + build isolation
# fetch maturin; default .venv-test/bin/python). The wheel is built with the dev profile
# (VRAMSCOPE_WHEEL_PROFILE=release for the release build): the profile changes the native
# module's speed, not what the package imports or installs.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-.venv-test/bin/python}"
profile="${VRAMSCOPE_WHEEL_PROFILE:-dev}"
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
MATURIN_PEP517_ARGS="--profile $profile" \
  "$py" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheel" .
wheel=("$work"/wheel/vramscope-*.whl)
"$py" -m venv "$work/bare"
"$work/bare/bin/python" -m pip install --quiet "${wheel[0]}"
echo "bare venv: $("$work/bare/bin/python" -m pip list --format=freeze | tr '\n' ' ')"
# Outside the checkout, so that nothing but the installed wheel can be imported.
cd "$work"
"$work/bare/bin/vramscope" --version
HF_HUB_OFFLINE=1 "$work/bare/bin/python" -c "import vramscope; vramscope.estimate('gpt2')"
HF_HUB_OFFLINE=1 "$work/bare/bin/python" -c "
import vramscope
r = vramscope.estimate('llama-3.1-8b', lora=16, tp=2)
assert r['job']['peft']['rank'] == 16 and r['job']['parallel']['tp'] == 2, r['job']
"
echo "bare venv: vramscope --version, import and estimate ran"
