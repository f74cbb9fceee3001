# Sourced by the tests that run a program under mpirun and compare its metrics.jsonl with a
# reference run's (test_mpi_glm_pipeline.sh, test_mpi_t5_pipeline.sh). The caller sets BIN (the
# program), TMP (where runs go) and the counters pass and fail.

# The program under test and its runs: PREFIX-one (one process), PREFIX-pp2 (two stages, saved
# at step 3), PREFIX-dp2 and PREFIX-tp2 are the names the checks below expect.

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
# The run a layout's numbers follow: one process's, but dp's and tp's pipelines follow dp 2 and
# tp 2 (dp draws other dropout masks than one process, tp another init); nothing for those two.
reference_of() { # prefix, layout name
    case "$2" in
        dp2 | tp2) ;;
        dp2?*) echo "$1-dp2" ;;
        tp2?*) echo "$1-tp2" ;;
        *) echo "$1-one" ;;
    esac
}
# prefix, options (data, no model): pp 2's export holds every stage's tensors, so one process
# evaluating it gets pp 2's last validation numbers.
check_export() {
    local prefix=$1
    shift
    if run "$prefix-eval" 1 "$@" --model "$TMP/$prefix-pp2/hf" --epochs 0 --max-steps 0 --save-interval -1 &&
        [ -n "$(last_eval "$prefix-pp2")" ] && [ "$(last_eval "$prefix-pp2")" = "$(last_eval "$prefix-eval")" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $prefix: pp 2's export does not evaluate to pp 2's numbers:" >&2
        last_eval "$prefix-pp2" >&2; last_eval "$prefix-eval" >&2
    fi
}
# prefix, options of the one-process run: pp 2's step-3 checkpoint resumed at pp 1 and at tp 2
# gives steps 4 and 5 and their evaluation as the single process does (a resume at an epoch's end
# evaluates that epoch again: left out).
check_resumes() {
    local prefix=$1 resume name np
    shift
    local opts=("$@")
    for resume in "pp1 1" "tp2 2 --tp 2"; do
        set -- $resume
        name="$prefix-resume-$1" np=$2
        shift 2
        if run "$name" "$np" "${opts[@]}" "$@" --save-interval -1 --resume-from "$TMP/$prefix-pp2/step-000003.tzck" &&
            grep -q "resumed from .*step-000003.tzck (step 3)" "$TMP/$name.log"; then
            check "saved at pp 2, resumed at $name" "$prefix-one" "$name" 3
        else
            fail=$((fail + 1)); echo "FAILED: $name from pp 2's checkpoint" >&2
        fi
    done
}
