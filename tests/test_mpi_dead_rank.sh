#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL, no goodbye) must not leave the others hanging: the whole
# mpirun job exits non-zero within the timeout; and a rank that hangs ends the job after
# --comm-timeout with a message naming the wait, also when the wait is a ZeRO-3 gather.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
TMP=$(mktemp -d)
trap 'pkill -9 -f "$TMP" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_dead_rank: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_dead_rank: the programs were built without MPI" >&2; exit 1; }
. "$SRC/tests/mpi_kill_rank.sh"
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2}
JSON
mkdir -p "$TMP/data"
head -n 257 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
# long enough to be killed in the middle: many small steps
mpirun -np 2 "$BIN" --arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 48 --batch-size 4 --epochs 1000 --log-interval 1 \
    --threads 1 --save-interval -1 --eval-interval -1 --save-dir "$TMP/run" > "$TMP/log" 2>&1 &
kill_one_rank $! "$TMP/log" "$TMP/run" || exit 1

# A rank that hangs (SIGSTOP: alive, silent) is what only the collective timeout catches: with
# --comm-timeout 3 the other rank stops within seconds, naming the wait and the silent rank.
# Under ZeRO-3 the wait is a block's all-gather inside the model's call, which must end the
# step just the same.
hang_case() { # name, extra options
    local name=$1
    shift
    mpirun -np 2 "$BIN" --arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 48 --batch-size 4 --epochs 1000 \
        --log-interval 1 --threads 1 --save-interval -1 --eval-interval -1 --save-dir "$TMP/$name" --comm-timeout 3 "$@" \
        > "$TMP/$name.log" 2>&1 &
    local job=$!
    for _ in $(seq 1 300); do
        grep -aq "step [0-9]" "$TMP/$name.log" 2>/dev/null && break
        sleep 0.1
    done
    local ranks victim
    ranks=$(pgrep -f -- "--save-dir $TMP/$name " | while read -r p; do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "gpt2-classify" ] && echo "$p"; done)
    victim=$(tail -n 1 <<< "$ranks")
    [ -n "$victim" ] || { echo "FAILED: $name: no rank to stop (training did not start?)"; cat "$TMP/$name.log"; return 1; }
    kill -STOP "$victim"
    for _ in $(seq 1 300); do # 3 s of timeout, and some slack for an oversubscribed machine
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$job" 2>/dev/null &&
        { echo "FAILED: $name: the job still runs 30 s after a rank stopped (--comm-timeout 3)"; tail -5 "$TMP/$name.log"; return 1; }
    wait "$job"
    local rc=$?
    [ "$rc" -ne 0 ] || { echo "FAILED: $name: the job exited 0 after a rank hung"; return 1; }
    grep -q "did not complete within 3 s: rank [01] died, hangs or skipped it" "$TMP/$name.log" ||
        { echo "FAILED: $name: no timeout message naming the silent rank"; cat "$TMP/$name.log"; return 1; }
}
hang_case hang || exit 1
hang_case hang_zero3 --zero 3 || exit 1
echo "test_mpi_dead_rank: 3 passed, 0 failed"
