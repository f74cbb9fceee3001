#!/usr/bin/env bash
# A CUDA build made here, packed to run on a GPU machine that cannot build tunezoo (one with
# nvcc, the CUDA libraries and a driver, but none of our Debian packages and no network, as
# the GPU machines lent to this project are):
#
#   scripts/gpu_pack.sh [--arch SM] [--out FILE]
#
# builds the programs and the cuda-labelled tests into build-gpu/ (-Werror, for sm_SM only,
# default 90: H100 and H200; without MPI and oneDNN, which the GPU checks do not use) and writes
# FILE (default build-gpu-pack/gpu-pack.tar.xz, about 7 MB): the programs, those tests, their
# ctest files, and every shared library they need that is neither glibc's nor CUDA's (OpenBLAS,
# cJSON, sentencepiece, libgomp, gfortran), which the GPU machine lacks. CUDA's own libraries
# (cudart, cuBLAS, cuBLASLt, NCCL, cuDNN, NVRTC) are large and come with the GPU machine; gpu_check.sh finds
# them there. On the GPU machine, in a checkout of the same commit:
#
#   scripts/gpu_check.sh --pack build-gpu-pack/gpu-pack.tar.xz --quick --part first --out "$OUT"
#   scripts/gpu_check.sh --pack build-gpu-pack/gpu-pack.tar.xz --part second --out "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=90 OUTFILE=build-gpu-pack/gpu-pack.tar.xz
while [ $# -gt 0 ]; do
    case "$1" in
    --arch | --out)
        [ $# -ge 2 ] || { echo "gpu_pack.sh: $1 needs a value" >&2; exit 2; }
        if [ "$1" = --arch ]; then ARCH=$2; else OUTFILE=$2; fi
        shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_pack.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
B=build-gpu
PROGRAMS="gpt2-classify bert-classify t5-finetune glm-finetune gpt2-finetune"
TESTS="test_cuda_ops test_cuda_typed test_comm_nccl"
mkdir -p "$B"
cmake -S . -B "$B" -DUSE_CUDA=ON -DUSE_MPI=OFF -DUSE_DNNL=OFF -DCMAKE_BUILD_TYPE=Release -DWERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$B/configure.log" 2>&1 || { tail -20 "$B/configure.log"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$B" -j "$(nproc)" --target $PROGRAMS $TESTS

# the libraries to carry: what ldd resolves outside glibc, the C++ runtime, zlib and CUDA
rm -rf "${B:?}/lib"
mkdir -p "$B/lib" "$(dirname "$OUTFILE")"
files=()
for p in $PROGRAMS; do files+=("$B/bin/$p"); done
for t in $TESTS; do files+=("$B/tests/$t"); done
ldd "${files[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvrtc[a-z-]*)\.so' |
    while read -r lib; do cp -L "$lib" "$B/lib/"; done
pwd > "$B/pack-source-dir" # the ctest files name this checkout's path; gpu_check.sh rewrites it there
tar cJf "$OUTFILE" "${files[@]}" "$B/CTestTestfile.cmake" "$B/tests/CTestTestfile.cmake" "$B/lib" "$B/pack-source-dir"
echo "gpu_pack.sh: wrote $OUTFILE ($(du -h "$OUTFILE" | cut -f1); libraries: $(ls "$B/lib" | tr '\n' ' '))"
