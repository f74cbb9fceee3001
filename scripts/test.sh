#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (CUDA sources too when nvcc
# is present) with warnings as errors, and runs every test through ctest. Tests that need a
# GPU report "skipped" where there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DWERROR=ON
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
