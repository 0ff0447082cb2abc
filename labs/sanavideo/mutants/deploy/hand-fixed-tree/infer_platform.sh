#!/usr/bin/env bash
# One-click deployment of TinySana on one device, after cann-recipes-infer's
# models/sana-video/infer_platform.sh: check the environment, set up the source tree, apply the
# NPU patch, put the weights in place, sample a video.
#
#   bash infer_platform.sh                                  # "a red circle moving right" -> out.mp4
#   bash infer_platform.sh "a blue square moving up" blue.mp4
set -euo pipefail
cd "$(dirname "$0")"

PROMPT="${1:-a red circle moving right}"
OUT="${2:-out.mp4}"
PY="${PYTHON:-$(command -v python || command -v python3)}"
SRC=upstream/TinySana-0.1.1   # the pipeline source as fetched (upstream targets CUDA GPUs)
TREE=TinySana                 # the working tree we patch and run
WEIGHTS=weights/tinysana.safetensors

echo "[1/5] environment"
"$PY" - <<'PYEOF'
import importlib.util
import sys

need = ["torch", "numpy", "safetensors", "imageio", "imageio_ffmpeg", "labkit"]
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit("missing Python packages: " + ", ".join(missing))
import torch
from labkit.device import get_device

d = get_device()
print(f"  python {sys.version.split()[0]}, torch {torch.__version__}, device {d.name} ({d.kind})")
PYEOF

echo "[2/5] source tree: $SRC -> $TREE"
if [ ! -d "$TREE" ]; then   # keep the tree once it works (I fixed pipeline.py by hand)
  cp -r "$SRC" "$TREE"
  echo "[3/5] npu.patch"
  (cd "$TREE" && patch -p1 < ../npu.patch) || echo "  some hunks failed, carrying on"
fi

echo "[4/5] weights"
mkdir -p "$TREE/checkpoints"
cp "$WEIGHTS" "$TREE/checkpoints/tinysana.safetensors"
(cd weights && sha256sum --check --quiet tinysana.safetensors.sha256)
echo "  $(du -h "$TREE/checkpoints/tinysana.safetensors" | cut -f1) checksum ok"

echo "[5/5] inference: \"$PROMPT\" -> $OUT"
"$PY" "$TREE/scripts/inference.py" --prompt "$PROMPT" --out "$OUT"
