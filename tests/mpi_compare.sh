# Sourced by the tests that run a program under mpirun and compare its metrics.jsonl with a
# reference run's (test_mpi_glm_pipeline.sh, test_mpi_t5_pipeline.sh). The caller sets BIN (the
# program), TMP (where runs go) and the counters pass and fail.

# A run's training and evaluation numbers, one per line, leaving out steps up to the second
# argument (0: none).
numbers() {
    grep -v "\"step\":[0-${2:-0}]," "$TMP/$1/metrics.jsonl" |
        grep -o '"\(loss\|grad_norm\|accuracy\|f1\)":[-0-9.e]*' | cut -d: -f2
}
# A run's last evaluation, as its fields.
last_eval() { grep '"type":"eval"' "$TMP/$1/metrics.jsonl" | tail -n 1 | grep -o '"\(loss\|accuracy\|f1\)":[-0-9.e]*'; }
# what, reference, run, [the last step to leave out of both]: the same count of numbers (at
# least 3), each within DESIGN.md's tolerance.
check() {
    if paste <(numbers "$2" "${4:-0}") <(numbers "$3" "${4:-0}") |
            awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' &&
        [ "$(numbers "$2" "${4:-0}" | wc -l)" -eq "$(numbers "$3" "${4:-0}" | wc -l)" ] &&
        [ "$(numbers "$3" "${4:-0}" | wc -l)" -ge 3 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $1: $3 differs from $2:" >&2
        paste <(numbers "$2" "${4:-0}") <(numbers "$3" "${4:-0}") >&2
    fi
}
# name, ranks, options: one process, or mpirun -np ranks; its log in $TMP/name.log.
run() {
    local name=$1 np=$2
    shift 2
    if [ "$np" -eq 1 ]; then
        "$BIN" "$@" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
    else
        mpirun -np "$np" "$BIN" "$@" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
    fi || { echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; return 1; }
}
