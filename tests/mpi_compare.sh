# Sourced by the tests that run a program in several layouts (one process, or mpirun with --pp,
# --tp, dp ranks, ZeRO) and compare their metrics.jsonl. The caller sets BIN (the program), TMP
# (where runs go) and the counters pass and fail, and registers each run with `run`.
#
# What a comparison may promise (docs/architecture.md, "Numerical truth"). Two layouts that add in another
# order (a tied copy's gradient summed across stages, dp's partial sums, tp's pieces, the norm's
# stages) agree for one step from the same weights within the per-element tolerance. They
# do not stay within it for several steps: AdamW moves a weight by about lr * g / (|g| + eps), so
# wherever |g| is near eps a 1e-12 difference in g becomes a difference in the step, and five
# steps took a 3e-12 difference in the gradient norm to 1e-4 on one CPU (1e-9 on another, where
# the kernels happen to round alike). No fixed tolerance holds on every machine. So `check`
# compares step 1, where both runs start from the same weights, and each later step k from the
# same weights too: the reference layout resumes from the run's checkpoint of step k - 1 and
# takes one step. The runs therefore save every step (SAVE_EVERY_STEP) and use a constant
# learning rate (the schedule's decay depends on --max-steps, which a one-step resume changes).

# Options every compared run takes: a checkpoint at every step, all kept, and a constant rate.
SAVE_EVERY_STEP=(--save-interval 1 --keep 1000 --schedule constant)

declare -A LAYOUT_RANKS LAYOUT_OPTS

# name, ranks, options: one process, or mpirun -np ranks; its log in $TMP/name.log. The options
# are remembered, so that `check` can resume this layout from another run's checkpoints.
run() {
    local name=$1 np=$2
    shift 2
    LAYOUT_RANKS[$name]=$np
    LAYOUT_OPTS[$name]=$(printf '%q ' "$@")
    if [ "$np" -eq 1 ]; then
        "$BIN" "$@" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
    else
        mpirun -np "$np" "$BIN" "$@" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
    fi || { echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; return 1; }
}

# The metrics compared (a grep alternation); a test of another task's metrics sets its own.
: "${METRICS:=loss\|grad_norm\|accuracy\|f1}"
# A run's training and evaluation numbers at one step, in file order (train, then eval).
numbers_at() {
    grep "\"step\":$2," "$TMP/$1/metrics.jsonl" | grep -o "\"\($METRICS\)\":[-0-9.e]*" | cut -d: -f2
}
# The last training step of a run.
last_step() { grep '"type":"train"' "$TMP/$1/metrics.jsonl" | tail -n 1 | sed 's/.*"step":\([0-9]*\),.*/\1/'; }
# A run's last evaluation, as its fields.
last_eval() { grep '"type":"eval"' "$TMP/$1/metrics.jsonl" | tail -n 1 | grep -o '"\(loss\|accuracy\|f1\)":[-0-9.e]*'; }

# what, reference, candidate (two files of numbers): the candidate has the reference's count (at
# least one) and each number is within the tolerance, 1e-5 + 1e-4 |ref|.
close() {
    [ -s "$2" ] && [ "$(wc -l < "$2")" -eq "$(wc -l < "$3")" ] &&
        paste "$2" "$3" | awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' &&
        return 0
    echo "FAILED: $1:" >&2
    paste "$2" "$3" >&2
    return 1
}

# what, reference layout, run: step 1 as the reference ran it; then each step k > 1 as the
# reference layout takes it from the run's checkpoint of step k - 1 (training numbers, and the
# evaluation when the run evaluated at step k). One pass or one failure is counted.
check() {
    local what=$1 ref=$2 name=$3 steps k ok=1
    steps=$(last_step "$name")
    [ -n "$steps" ] && [ "$steps" -ge 2 ] && [ "$(last_step "$ref")" = "$steps" ] ||
        { fail=$((fail + 1)); echo "FAILED: $what: $name ran ${steps:-no} steps, $ref $(last_step "$ref")" >&2; return; }
    numbers_at "$ref" 1 > "$TMP/cmp.ref"
    numbers_at "$name" 1 > "$TMP/cmp.run"
    close "$what, step 1: $name differs from $ref" "$TMP/cmp.ref" "$TMP/cmp.run" || ok=0
    for ((k = 2; k <= steps; k++)); do
        local from="$ref@$name-$k" ckpt
        ckpt=$(printf '%s/%s/step-%06d.tzck' "$TMP" "$name" $((k - 1)))
        eval "set -- ${LAYOUT_OPTS[$ref]}"
        run "$from" "${LAYOUT_RANKS[$ref]}" "$@" --resume-from "$ckpt" --max-steps "$k" --save-interval -1 ||
            { ok=0; continue; }
        numbers_at "$name" "$k" > "$TMP/cmp.run"
        # the resumed run evaluates at its last step; the run may not have
        numbers_at "$from" "$k" | head -n "$(wc -l < "$TMP/cmp.run")" > "$TMP/cmp.ref"
        close "$what, step $k from $name's step $((k - 1)): $name differs from $ref" "$TMP/cmp.ref" "$TMP/cmp.run" ||
            ok=0
    done
    if [ "$ok" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}

# A checkpoint's tensors as tz-convert inspect lists them: names, shapes and CRC-32s.
tensors() { "$(dirname "$BIN")/tz-convert" inspect "$1" | tail -n +2; }
# what, reference, run, for layouts that add every gradient in the same order (stages without a
# tied copy): the last checkpoints hold the same tensors bit for bit, so every step ran from the
# same weights, and each step's numbers agree within the tolerance (the loss and the norm sum
# over the stages in another order). One pass or one failure is counted.
check_bits() {
    local what=$1 ref=$2 name=$3 steps k ok=1
    steps=$(last_step "$ref")
    if [ -z "$steps" ] || [ "$(last_step "$name")" != "$steps" ] ||
        ! cmp -s <(tensors "$(printf '%s/%s/step-%06d.tzck' "$TMP" "$ref" "$steps")") \
                 <(tensors "$(printf '%s/%s/step-%06d.tzck' "$TMP" "$name" "$steps")"); then
        fail=$((fail + 1)); echo "FAILED: $what: $name's last tensors differ from $ref's (or its steps do)" >&2
        return
    fi
    for ((k = 1; k <= steps; k++)); do
        numbers_at "$ref" "$k" > "$TMP/cmp.ref"
        numbers_at "$name" "$k" > "$TMP/cmp.run"
        close "$what, step $k: $name differs from $ref" "$TMP/cmp.ref" "$TMP/cmp.run" || ok=0
    done
    if [ "$ok" -eq 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
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
# evaluating it gets pp 2's last validation numbers, bit for bit.
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
# what, the run that saved, its step k, a name, ranks, options: the saved run's checkpoint of step k
# resumed in the layout the options give takes the saved run's step k + 1 within the tolerance
# (from the same weights; another layout adds in another order).
check_resume() {
    local what=$1 saved=$2 k=$3 name=$4 np=$5 ckpt
    shift 5
    ckpt=$(printf '%s/%s/step-%06d.tzck' "$TMP" "$saved" "$k")
    if run "$name" "$np" "$@" --save-interval -1 --max-steps $((k + 1)) --resume-from "$ckpt" &&
        grep -q "resumed from .*$(basename "$ckpt") (step $k)" "$TMP/$name.log"; then
        numbers_at "$saved" $((k + 1)) > "$TMP/cmp.ref"
        numbers_at "$name" $((k + 1)) | head -n "$(wc -l < "$TMP/cmp.ref")" > "$TMP/cmp.run"
        if close "$what: step $((k + 1)) differs from $saved's" "$TMP/cmp.ref" "$TMP/cmp.run"; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1))
        fi
    else
        fail=$((fail + 1)); echo "FAILED: $what: $name did not resume from $ckpt" >&2
    fi
}
# prefix, options of the one-process run: pp 2's checkpoint of step 3 resumes at tp 2 (a resume
# at pp 1 is what `check` does at every step).
check_resume_tp2() {
    local prefix=$1
    shift
    check_resume "saved at pp 2, resumed at tp 2" "$prefix-pp2" 3 "$prefix-resume-tp2" 2 "$@" --tp 2
}
