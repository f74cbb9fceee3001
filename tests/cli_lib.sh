# Sourced by the shell tests of the programs: a pass/fail count and expect_fail. The caller sets
# BIN_DIR and TMP (a temporary folder it removes); the programs' stdout and stderr go to
# $TMP/out and $TMP/err.
pass=0
fail=0
ok() { pass=$((pass + 1)); }
# bad WHAT: a failure, with the last lines of the program's stderr
bad() { fail=$((fail + 1)); printf 'FAILED: %s\n' "$1" >&2; [ -f "$TMP/err" ] && tail -5 "$TMP/err" | sed 's/^/    /' >&2; }
# expect_fail NAME RC PATTERN PROGRAM ARGS...: exit code RC and a stderr matching PATTERN, in one
# line (an error in the input, RC 1, or a usage error, RC 2, with its usage hint on the same line),
# with no newline of a message shown escaped (\x0a) in it
expect_fail() {
    local name=$1 want_rc=$2 pattern=$3 prog=$4
    shift 4
    "$BIN_DIR/$prog" "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    if [ "$rc" -ne "$want_rc" ]; then bad "$name: exit $rc, want $want_rc"; return; fi
    if ! grep -q -- "$pattern" "$TMP/err"; then bad "$name: stderr lacks '$pattern'"; return; fi
    if [ "$(wc -l < "$TMP/err")" -ne 1 ]; then bad "$name: error is not one line"; return; fi
    if grep -qF '\x0a' "$TMP/err"; then bad "$name: error shows an escaped newline"; return; fi
    ok
}
# finish NAME: the count, and the exit status
finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
