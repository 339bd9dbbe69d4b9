#!/usr/bin/env bash
# Creates a separate venv with Hugging Face transformers on the CPU build of PyTorch: the peer
# benchmarks/generation.py times (XLNetLMHeadModel.generate) against our cached generation.
# Kept out of .venv so the default environment stays free of torch; the versions are the interop
# extra's (setup.py INTEROP_REQUIRES). A plain `torch` from the index would pull several GB of CUDA
# packages, hence the +cpu build first.
# Usage: benchmarks/peers/setup_transformers.sh [VENV_DIR]   (default /tmp/peer-transformers)
set -euo pipefail
venv=${1:-/tmp/peer-transformers}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "torch==2.13.0+cpu"
  "$venv/bin/pip" install -q "transformers==5.23.0" safetensors sentencepiece
fi
echo "$venv"
