#!/usr/bin/env bash
# t5-finetune with pipeline stages (--pp) under mpirun, dropout on, from the same random init:
# pp 2 and pp 4 (the encoder on the first half of the stages; pp 4 also recomputing each
# micro-batch's forward, --pp-recompute) take the single process's steps (losses, gradient norms,
# validation loss), for T5 v1.0 (its head tied to shared) and v1.1 (gated, its own lm_head; its
# encoder and decoder still share `shared` across stages); dp 2 x pp 2 (also with ZeRO-1, and
# ZeRO-3 with and without --offload-params, where shared's copies sum their gradient pieces) takes
# dp 2's, and tp 2 x pp 2 tp 2's (dp draws other dropout masks than one process, tp another init).
# `shared`'s copies on the stages add their gradients in another order than one process, so each
# step is compared from the same weights within the tolerance (tests/mpi_compare.sh says why),
# and every such comparison resumes the reference from the stages' checkpoint, across layouts. pp
# 2's export holds every stage's tensors: one process evaluating it gets pp 2's last validation
# loss; pp 2's checkpoint resumes at tp 2 and takes pp 2's next step. --predict with --pp is
# refused in one line.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/t5-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_t5_pipeline: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_t5_pipeline: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

head -n 60 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/s.en"
head -n 60 "$SRC/assets/multi30k-en-de/val.de" > "$TMP/s.de"
cat > "$TMP/v11.json" <<JSON
{"model_type": "t5", "vocab_size": 32128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_heads": 4, "num_layers": 2,
 "num_decoder_layers": 2, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false, "dropout_rate": 0.1}
JSON
. "$SRC/tests/mpi_compare.sh"
COMMON=("$TMP/s.en" "$TMP/s.de" --threads 1 --batch-size 4 --micro-batches 4 --max-steps 5 --log-interval 1
        --lr 1e-3 --no-cache --eval-generate=false --dropout 0.1 "${SAVE_EVERY_STEP[@]}")

for arch in v10 v11; do
    ARCH=()
    [ "$arch" = v11 ] && ARCH=(--arch "$TMP/v11.json")
    run "$arch-one" 1 "${COMMON[@]}" "${ARCH[@]}" || { fail=$((fail + 1)); continue; }
    layouts=("pp2 2 --pp 2" "pp4 4 --pp 4" "pp4r 4 --pp 4 --pp-recompute")
    [ "$arch" = v10 ] && layouts+=("dp2 2" "dp2pp2 4 --pp 2" "dp2pp2z1 4 --pp 2 --zero 1" "dp2pp2z3 4 --pp 2 --zero 3"
                                   "dp2pp2z3off 4 --pp 2 --zero 3 --offload-params" "tp2 2 --tp 2"
                                   "tp2pp2 4 --tp 2 --pp 2")
    for layout in "${layouts[@]}"; do
        set -- $layout
        name="$arch-$1" np=$2
        shift 2
        run "$name" "$np" "${COMMON[@]}" "${ARCH[@]}" "$@" || { fail=$((fail + 1)); continue; }
        ref=$(reference_of "$arch" "${name#"$arch"-}")
        [ -n "$ref" ] && check "$arch at $name" "$ref" "$name"
    done
    check_export "$arch" "${COMMON[@]}"
done

check_resume_tp2 v10 "${COMMON[@]}"

expect_usage() { # what, message, options
    local what=$1 msg=$2
    shift 2
    mpirun -np 2 "$BIN" "$@" --save-dir "$TMP/bad" > "$TMP/bad.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 2 ] && grep -q -- "$msg" "$TMP/bad.log" && ! grep -q "^data:" "$TMP/bad.log"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $what (exit $rc):" >&2; cat "$TMP/bad.log" >&2
    fi
}
expect_usage "--pp 2 --predict" "--predict generates with the whole model on one rank" --pp 2 \
    --predict "$TMP/s.en" --model "$TMP/v10-pp2/hf"
echo "test_mpi_t5_pipeline: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
