#!/usr/bin/env bash
# Where a GPU step's time goes, for GPT-2 124M as a language model in bf16 (gpt2-finetune, from
# scratch, on the shipped MRPC text), on a GPU machine:
#
#   scripts/bench/gpu_profile.sh BIN_DIR OUT_DIR [--no-ncu]
#
#  1. ms/step at 16384 tokens a step as 16 x 1024, 32 x 512, 64 x 256 and 128 x 128, with the
#     materialized attention, the fused one (TZ_CUDA_ATTENTION=fused) and cuDNN's SDPA
#     (TZ_CUDA_ATTENTION=cudnn), and at 16 x 1024
#     without dropout and in fp32 (mean of steps 4-9): what grows with the length is attention's;
#     what dropout costs;
#  2. ncu's kernel times over 2 steps at 2 x 1024 (start-up included), summed per kernel name:
#     the top 15 with their share (scripts/bench/ncu_top.py), with the fused attention (the
#     materialized one's were measured on 2026-11-27: see docs/benchmarks.md).
#
# Prints "INFO profile ..." lines (scripts/gpu_check.sh appends them to its summary); logs in
# OUT_DIR. About two minutes on an H200.
set -u
[ $# -ge 2 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
BIN=$1 W=$2 NCU=1
[ "${3:-}" = --no-ncu ] && NCU=0
cd "$(dirname "$0")/../.." || exit 2
mkdir -p "$W" || exit 1
for _ in 1 2 3 4; do cut -f4,5 assets/glue-mrpc/train.tsv; done > "$W/lm.txt"
echo '{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,"n_layer":12,"n_head":12}' > "$W/gpt2.json"
echo '{"model_type":"gpt2","vocab_size":50257,"n_positions":1024,"n_embd":768,"n_layer":12,"n_head":12,
 "resid_pdrop":0,"attn_pdrop":0,"embd_pdrop":0}' > "$W/gpt2-nodrop.json"

# run NAME ARCH T B STEPS [ARGS]: one run, its log in W/NAME.log
run() {
    local name=$1 arch=$2 t=$3 b=$4 steps=$5
    shift 5
    timeout 120 "$BIN/gpt2-finetune" "$W/lm.txt" --arch "$W/$arch.json" --block-size "$t" --batch-size "$b" \
        --max-steps "$steps" --log-interval 1 --eval-interval -1 --save-interval -1 --device cuda --precision bf16 \
        --val-split 0.01 --no-cache --save-dir "$W/$name" "$@" > "$W/$name.log" 2>&1
}
ms() { grep '"type":"train"' "$1/metrics.jsonl" 2> /dev/null | tail -n +4 |
    sed 's/.*"ms_per_step":\([0-9.eE+-]*\).*/\1/' | awk '{ s += $1; n++ } END { if (n) printf "%.1f", s / n; else printf "failed" }'; }

for attention in materialized fused cudnn; do
    sweep=""
    for tb in 1024:16 512:32 256:64 128:128; do
        TZ_CUDA_ATTENTION=$attention run "$attention-t${tb%:*}" gpt2 "${tb%:*}" "${tb#*:}" 9
        sweep="$sweep ${tb#*:}x${tb%:*} $(ms "$W/$attention-t${tb%:*}")"
    done
    echo "INFO profile gpt2-finetune 124M bf16 ms/step at 16384 tokens, $attention attention:$sweep"
done
run nodrop gpt2-nodrop 1024 16 9
run fp32 gpt2 1024 16 9 --precision fp32
echo "INFO profile 16x1024 without dropout $(ms "$W/nodrop") ms/step; in fp32 $(ms "$W/fp32") ms/step"

if [ "$NCU" = 1 ] && command -v ncu > /dev/null && command -v python3 > /dev/null; then
    TZ_CUDA_ATTENTION=fused timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
        "$BIN/gpt2-finetune" "$W/lm.txt" --arch "$W/gpt2.json" --block-size 1024 --batch-size 2 --max-steps 2 \
        --log-interval 1 --eval-interval -1 --save-interval -1 --device cuda --precision bf16 --val-split 0.01 \
        --no-cache --save-dir "$W/ncu" > "$W/ncu.csv" 2> "$W/ncu.log"
    python3 scripts/bench/ncu_top.py "$W/ncu.csv" 15 | sed 's/^/INFO profile ncu (fused attention) /'
else
    echo "INFO profile ncu: not run (--no-ncu, or no ncu or python3 here)"
fi
