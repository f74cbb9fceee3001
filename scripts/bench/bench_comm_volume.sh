#!/usr/bin/env bash
# Communication volume per optimizer step for each (dp, tp, ZeRO) layout, measured by counting every
# collective's payload (gpt2-classify --comm-stats) and printed next to the formula that
# predicts it. CPU, under mpirun; the model is a 2-layer, 32-wide GPT-2 on a slice of MRPC
# unless --arch FILE is given.
#
#   scripts/bench/bench_comm_volume.sh [--bin build/bin/gpt2-classify] [--arch config.json]
set -euo pipefail
BIN=build/bin/gpt2-classify
ARCH=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN=$2; shift 2 ;;
        --arch) ARCH=$2; shift 2 ;;
        *) echo "usage: $0 [--bin PATH] [--arch config.json]" >&2; exit 2 ;;
    esac
done
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -z "$ARCH" ]; then
    ARCH=$TMP/arch.json
    echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4}' > "$ARCH"
fi
mkdir -p "$TMP/data"
head -n 65 assets/glue-mrpc/train.tsv > "$TMP/data/train.tsv"
head -n 33 assets/glue-mrpc/dev.tsv > "$TMP/data/dev.tsv"
for layout in "2 1" "4 1" "2 2" "4 2" "4 4" "2 1 1" "2 1 3" "4 1 3"; do # ranks tp [ZeRO stage]
    set -- $layout
    echo "== $1 ranks, tp $2${3:+, ZeRO-$3}"
    mpirun -np "$1" "$BIN" --arch "$ARCH" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --max-steps 4 \
        --log-interval 0 --eval-interval -1 --save-interval -1 --threads 1 --tp "$2" --zero "${3:-0}" \
        --save-dir "$TMP/run" --comm-stats 2>&1 | tr '\r' '\n' | sed 's/\x1b\[K//g' | grep -a -A10 "^communication per" | grep -av '^\s*$'
done
