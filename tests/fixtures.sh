# Sourced by the shell tests: where their fixtures are, all inside the repository (assets/ for
# what the programs ship, tests/data/ for test-only files), and need_fixture, which ends the
# test with one line naming a fixture that is missing or unreadable (a failure, never a skip).
TZ_SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
ASSETS="$TZ_SRC/assets"
FIXTURES="$TZ_SRC/tests/data"

# need_fixture PATH...: each must exist and be readable.
need_fixture() {
    local f
    for f in "$@"; do
        if [ ! -r "$f" ]; then
            echo "FAILED: $(basename "$0" .sh): test fixture $f is missing or unreadable" \
                "(tests read only files inside the repository)" >&2
            exit 1
        fi
    done
}
