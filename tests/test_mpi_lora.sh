#!/usr/bin/env bash
# LoRA (issue 36) under mpirun: gpt2-classify with adapters on every linear takes the single
# process's steps (loss, gradient norm) at dp=2, tp=2, pp=2 (each stage loads its adapters),
# ZeRO-1 and -2 over dp=2 (the adapters' AdamW state and gradients sharded, the frozen base whole
# on each rank; ZeRO-2 also with the optimizer offloaded), and ZeRO-3 over dp=2 (the frozen base
# sharded too, block by block), also with the parameters offloaded, at tp=2 x dp=2 and at
# pp=2 x dp=2 (the tied wte frozen on both stages); it writes its merged model at tp=2 and pp=2 and its
# adapters at pp=2 (the first stage writes every stage's) as one process does, byte for byte.
# Every layout starts from the same base (an exported tiny GPT-2) and the same adapters (a PEFT
# folder one process wrote after a step, B not zero), with dropout off; each step is compared
# from the same weights (tests/mpi_compare.sh).
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap '[ -n "${TZ_KEEP:-}" ] || rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_lora: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_lora: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2,
 "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}' > "$TMP/arch.json"
EX="$SRC/assets/examples"
DATA=(--train-file "$EX/reviews-train.csv" --label-column sentiment --max-len 48 --threads 1 --no-cache)
METRICS='loss\|grad_norm'
. "$SRC/tests/mpi_compare.sh"
"$BIN" "${DATA[@]}" --arch "$TMP/arch.json" --epochs 0 --save-hf "$TMP/base" --save-dir "$TMP/init" \
    > "$TMP/init.log" 2>&1 || { echo "FAILED: export"; tail -5 "$TMP/init.log"; exit 1; }
"$BIN" "${DATA[@]}" --model "$TMP/base" --lora-r 4 --lora-targets c_attn,c_proj,c_fc --max-steps 1 --lr 1e-2 \
    --save-lora "$TMP/adapter" --save-dir "$TMP/first" > "$TMP/first.log" 2>&1 ||
    { echo "FAILED: the first adapters"; tail -5 "$TMP/first.log"; exit 1; }
ARGS=("${DATA[@]}" --model "$TMP/base" --lora-from "$TMP/adapter" --batch-size 8 --grad-accum 2 --max-steps 3
      --log-interval 1 --eval-interval -1 --lr 1e-3 "${SAVE_EVERY_STEP[@]}")

run one 1 "${ARGS[@]}" || { echo "FAILED: one process"; exit 1; }
for layout in "dp2 2" "tp2 2 --tp 2" "zero1 2 --zero 1" "zero2 2 --zero 2" "zero2off 2 --zero 2 --offload-optimizer" \
    "zero3 2 --zero 3" "zero3off 2 --zero 3 --offload-params" "zero3tp 4 --zero 3 --tp 2" \
    "pp2 2 --pp 2 --micro-batches 2" "pp2zero3 4 --pp 2 --micro-batches 2 --zero 3"; do
    set -- $layout
    name=$1
    np=$2
    shift 2
    run "$name" "$np" "${ARGS[@]}" "$@" || { fail=$((fail + 1)); continue; }
    check "LoRA $name" one "$name"
done
# --save-hf with LoRA at tp 2 (each rank folds its shards of the adapters into its shards of the
# base) writes the merged model one process writes, byte for byte
MERGE=("${DATA[@]}" --model "$TMP/base" --lora-from "$TMP/adapter" --epochs 0)
"$BIN" "${MERGE[@]}" --save-hf "$TMP/merged1" --save-dir "$TMP/m1" > "$TMP/m1.log" 2>&1 &&
    mpirun -np 2 "$BIN" "${MERGE[@]}" --tp 2 --save-hf "$TMP/merged2" --save-dir "$TMP/m2" > "$TMP/m2.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && cmp -s "$TMP/merged1/model.safetensors" "$TMP/merged2/model.safetensors"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: the merged model at tp 2 (exit $rc)" >&2; fi
# and at pp 2 (each stage folds its own layers; the first writes every stage's)
mpirun -np 2 "$BIN" "${MERGE[@]}" --pp 2 --micro-batches 2 --save-hf "$TMP/merged3" --save-dir "$TMP/m3" \
    > "$TMP/m3.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && cmp -s "$TMP/merged1/model.safetensors" "$TMP/merged3/model.safetensors"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: the merged model at pp 2 (exit $rc)" >&2; tail -3 "$TMP/m3.log" >&2; fi
# two pipeline stages: each loads its adapters from the folder and the first stage writes every
# stage's, the folder one process writes after the same steps, byte for byte
SAVE=("${DATA[@]}" --model "$TMP/base" --lora-from "$TMP/adapter" --batch-size 8 --grad-accum 2 --max-steps 3 --lr 1e-3)
"$BIN" "${SAVE[@]}" --save-dir "$TMP/s1" --save-lora "$TMP/saved1" > "$TMP/s1.log" 2>&1 &&
    mpirun -np 2 "$BIN" "${SAVE[@]}" --pp 2 --micro-batches 2 --save-dir "$TMP/s2" --save-lora "$TMP/saved2" \
        > "$TMP/s2.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && cmp -s "$TMP/saved1/adapter_model.safetensors" "$TMP/saved2/adapter_model.safetensors"; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: --save-lora at --pp 2 (exit $rc)" >&2; fi
echo "test_mpi_lora: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
