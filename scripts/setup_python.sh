#!/usr/bin/env bash
# Python for the golden-file generators and the PyTorch side of the benchmarks.
#
# Neither the build nor the tests need Python: the golden files are committed.
# This only prepares /usr/bin/python3 (Debian's interpreter) with a CPU-only
# torch from Debian (python3-torch 1.13.1, a few hundred MB instead of the GBs
# of CUDA wheels PyPI's torch pulls in) and a transformers release that still
# supports torch 1.13. It is idempotent: when the right versions are already
# importable it changes nothing.
#
#   bash scripts/setup_python.sh
#   /usr/bin/python3 scripts/golden/gen_gpt2_golden.py
set -euo pipefail

PY=/usr/bin/python3
TRANSFORMERS_VERSION=4.46.3
ACCELERATE_VERSION=0.34.2 # HF Trainer's (bench_minilm_glue.py); the last that keeps torch 1.13

have() {
  "$PY" - "$TRANSFORMERS_VERSION" <<'PYEOF' 2>/dev/null
import sys
import torch, safetensors, transformers, accelerate, google.protobuf, sentencepiece
sys.exit(0 if transformers.__version__ == sys.argv[1] else 1)
PYEOF
}

if have; then
  echo "setup_python: torch, transformers ${TRANSFORMERS_VERSION} and safetensors already present for ${PY}"
else
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  if ! "$PY" -c 'import torch' 2>/dev/null || ! "$PY" -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-torch python3-pip
  fi
  # T5's HF tokenizer converter (bench_t5.py) needs protobuf and sentencepiece
  if ! "$PY" -c 'import google.protobuf, sentencepiece' 2>/dev/null; then
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-protobuf python3-sentencepiece
  fi
  # --no-deps would be too strict (transformers needs tokenizers, huggingface-hub,
  # regex, ...); pip leaves Debian's torch and numpy alone since transformers
  # does not require torch.
  $SUDO "$PY" -m pip install -q --break-system-packages \
    "transformers==${TRANSFORMERS_VERSION}" "safetensors>=0.4"
  # --no-deps: accelerate would otherwise pull a PyPI torch (GBs of CUDA wheels) over Debian's
  $SUDO "$PY" -m pip install -q --break-system-packages --no-deps "accelerate==${ACCELERATE_VERSION}"
fi

"$PY" -c 'import torch, transformers, safetensors; print("torch", torch.__version__, "| transformers", transformers.__version__, "| safetensors", safetensors.__version__)'
