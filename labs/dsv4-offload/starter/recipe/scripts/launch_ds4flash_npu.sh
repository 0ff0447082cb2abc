#!/usr/bin/env bash
# Launch DeepSeek-V4-Flash (toy) on one emulated card with CPU experts.
# Mirrors cann-recipes-infer integration/sglang/dsv4-flash-single-npu-moe-offload/
# scripts/tools/launch_ds4flash_npu.sh: read the recipe's environment, then start the server.
#
#   bash recipe/scripts/launch_ds4flash_npu.sh --plan-only   # memory plan only (step 1)
#   bash recipe/scripts/launch_ds4flash_npu.sh               # plan, then serve the demo prompts
set -euo pipefail
LAB="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$LAB"
echo "recipe: $LAB/recipe/config/dsv4_flash_toy.env"
grep -E '^[A-Z_]+=' recipe/config/dsv4_flash_toy.env | while IFS='=' read -r key value; do
    echo "  $key=${!key:-$value}"
done
exec python -m offload.launch "$@"
