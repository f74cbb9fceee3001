#!/usr/bin/env bash
# Issue 18's GPU benchmark in one run: builds the programs with the CUDA backend into build-gpu/,
# then times tunezoo against PyTorch eager (fp32, bf16) and torch.compile (bf16) on the same GPU
# (scripts/bench/bench_gpu.py; its options pass through, e.g. --workloads gpt2-mrpc --steps 30).
# Needs nvcc and a GPU, and python3 with torch and transformers.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
mkdir -p build-gpu
cmake -S . -B build-gpu -DUSE_CUDA=ON -DCMAKE_BUILD_TYPE=Release > build-gpu/build.log 2>&1 ||
    { tail -20 build-gpu/build.log; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target gpt2-classify gpt2-finetune bert-classify t5-finetune >> build-gpu/build.log 2>&1 ||
    { tail -20 build-gpu/build.log; exit 1; }
exec python3 scripts/bench/bench_gpu.py --bin-dir build-gpu/bin --device cuda "$@"
