#!/usr/bin/env bash
# scripts/gpu_check.sh keeps to its --budget without a GPU: over a build folder whose programs
# hang, the first step that gets its minimum is stopped by its timeout, every later one is
# recorded as SKIP instead of started, the call ends inside the budget, and --out gets the summary
# and the logs' archive. A
# GPU lease is 15 minutes in all, so a check that overran it would lose every line after it.
set -u
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAILED: test_gpu_check: $*" >&2; exit 1; }

B=$T/build
mkdir -p "$B/bin" "$B/tests"
for p in gpt2-classify bert-classify t5-finetune glm-finetune gpt2-finetune; do
    printf '#!/bin/sh\nsleep 300\n' > "$B/bin/$p"
    chmod +x "$B/bin/$p"
done
cp "$B/bin/gpt2-classify" "$B/tests/test_cuda_ops"

# bad options: exit 2 with a line that names the option
for bad in "--part third" "--budget soon" "--pack $T/none.tar.xz" "--frobnicate"; do
    # shellcheck disable=SC2086 # each case is several words on purpose
    out=$(bash "$SRC/scripts/gpu_check.sh" $bad 2>&1)
    rc=$?
    [ "$rc" = 2 ] || fail "gpu_check.sh $bad: exit $rc, want 2 ($out)"
    echo "$out" | grep -q "^gpu_check.sh: .*${bad%% *}" || fail "gpu_check.sh $bad: the error does not name the option: $out"
done

start=$(date +%s)
# 40 s: the set-up's second or two (over ten when the whole suite loads both cores: at 30 s that
# once left no step its minimum, so nothing hung), then the first step that gets its minimum hangs
# until its limit; which step that is depends on how long the set-up took
BUDGET=40
bash "$SRC/scripts/gpu_check.sh" --no-build --build-dir "$B" --part first --budget $BUDGET --quick --no-bench \
    --out "$T/out" > "$T/log" 2>&1
rc=$?
took=$(($(date +%s) - start))
S=$T/out/summary.txt
[ "$rc" = 1 ] || fail "exit $rc, want 1 (FAIL lines); log: $(tail -3 "$T/log")"
[ "$took" -le $BUDGET ] || fail "took $took s under --budget $BUDGET: $(cat "$S")"
[ -s "$S" ] || fail "no summary in --out"
tar tzf "$T/out/logs.tar.gz" > /dev/null 2>&1 || fail "no readable logs archive in --out"
grep -qE '^FAIL [^:]+: timed out after [0-9]+ s' "$S" || fail "the hung run was not timed out: $(cat "$S")"
grep -q '^SKIP gpt2-finetune on cuda, fp32, 50 steps: not started' "$S" || fail "later steps not skipped: $(cat "$S")"
grep -q '^INFO gpu_check: ' "$S" || fail "the summary has no last line: $(cat "$S")"
echo "test_gpu_check: $(grep -oE 'timed out after [0-9]+ s' "$S" | head -1), $(grep -c '^SKIP' "$S") steps skipped, done in $took s of $BUDGET"
