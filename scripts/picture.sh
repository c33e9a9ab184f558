#!/usr/bin/env bash
# Regenerates docs/picture.svg, the picture shown in the README: the SVG report of one
# example job (Llama 3.1 8B, LoRA r=16, micro-batch 2 × 4096 tokens on an H100 80GB).
#   scripts/picture.sh            (builds the release binary if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p vramscope
bin="${CARGO_TARGET_DIR:-target}/release/vramscope"
"$bin" estimate llama-3.1-8b --task train --batch 2 --seq 4096 --lora 16 --gpu h100-80gb \
  --svg docs/picture.svg --json > /dev/null
echo "wrote docs/picture.svg"
