#!/usr/bin/env bash
# Installs the distribution packages tunezoo builds against, skipping those already there.
# Debian/Ubuntu (apt). Runs as root, or through sudo when it is available. The CUDA toolkit
# is optional and not installed here: when nvcc is on PATH the build adds the CUDA backend.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenblas-openmp-dev   # BLAS on OpenMP (shares our thread pool)
  libdnnl-dev              # oneDNN: the CPU's bf16 (and faster fp32) matmuls, on the same OpenMP pool
  libcjson-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  libsentencepiece-dev
  clang libclang-rt-dev    # libFuzzer: tests/test_fuzz_smoke.sh runs the parsers' fuzz targets
  clang-format             # the sources' layout (.clang-format), checked by tests/test_format.sh
)

# cuDNN's fused attention (runtime/backend/cuda/cuda_sdpa.cc) compiles against cudnn-frontend's
# headers: PyPI's nvidia-cudnn-frontend (header-only C++), installed where nvcc is into a folder of
# our own (CMake looks there). Without them the build leaves that attention out, and
# TZ_CUDA_ATTENTION=cudnn says so; nothing else needs them.
FRONTEND_VERSION=1.32.0
FRONTEND_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/tunezoo/cudnn-frontend-$FRONTEND_VERSION"
install_cudnn_frontend() {
  command -v nvcc > /dev/null || return 0
  [ -f "$FRONTEND_DIR/include/cudnn_frontend.h" ] && return 0
  if python3 -m pip install -q --no-deps --no-compile --target "$FRONTEND_DIR" \
      "nvidia-cudnn-frontend==$FRONTEND_VERSION" > /dev/null 2>&1 &&
      [ -f "$FRONTEND_DIR/include/cudnn_frontend.h" ]; then
    echo "setup: cudnn-frontend $FRONTEND_VERSION's headers in $FRONTEND_DIR"
  else
    echo "setup: pip could not install nvidia-cudnn-frontend==$FRONTEND_VERSION: the build leaves cuDNN's fused attention out" >&2
  fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  install_cudnn_frontend
  exit 0
fi

if ! command -v apt-get > /dev/null; then
  echo "setup: apt-get not found; install these packages with your package manager: ${missing[*]}" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo > /dev/null; then SUDO=sudo; else
    echo "setup: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_cudnn_frontend
