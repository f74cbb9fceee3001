#!/usr/bin/env bash
# Every tracked C, C++ and CUDA source is laid out as .clang-format says, but the generated
# tokenizers/tok_unicode.c (scripts write it). The layout is clang-format 14's (Debian 12's,
# which scripts/setup.sh installs); another major version wraps some lines differently, so
# without a clang-format 14 this test is skipped (exit 77), naming the version it found.
# To fix a failure: clang-format-14 -i FILE.
set -u
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
WANT_MAJOR=14
major_of() { "$1" --version 2> /dev/null | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p'; }
fmt=""
for cand in clang-format-$WANT_MAJOR clang-format; do
    if command -v "$cand" > /dev/null && [ "$(major_of "$cand")" = "$WANT_MAJOR" ]; then fmt=$cand; break; fi
done
if [ -z "$fmt" ]; then
    if ! command -v clang-format > /dev/null; then
        echo "FAILED: test_format: no clang-format on PATH (scripts/setup.sh installs it)" >&2
        exit 1
    fi
    found=$(major_of clang-format)
    echo "test_format: skipped: clang-format ${found:-of unknown version} found, the layout is clang-format $WANT_MAJOR's"
    exit 77
fi
cd "$SRC" || exit 1
if git rev-parse --git-dir > /dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cc' | grep -v '^tokenizers/tok_unicode\.c$')
else # a source tree without git: the folders the sources live in
    mapfile -t files < <(find apps runtime models checkpoints data tokenizers metrics tests scripts \
                             \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cc' \) 2> /dev/null |
                         grep -v '^tokenizers/tok_unicode\.c$' | sort)
fi
[ "${#files[@]}" -gt 100 ] || { echo "FAILED: test_format: found only ${#files[@]} sources under $SRC" >&2; exit 1; }
bad=0
for f in "${files[@]}"; do
    # --dry-run names each place it would change as FILE:LINE:COLUMN; the first is enough to start from
    if ! said=$("$fmt" --dry-run --Werror "$f" 2>&1 > /dev/null); then
        first=$(printf '%s\n' "$said" | grep -m1 -E '^[^ ]+:[0-9]+:[0-9]+:')
        echo "FAILED: test_format: ${first:-$f: not as .clang-format lays it out}" >&2
        bad=$((bad + 1))
    fi
done
if [ "$bad" -gt 0 ]; then
    echo "FAILED: test_format: $bad of ${#files[@]} sources are not as .clang-format lays them out ($fmt -i FILE)" >&2
    exit 1
fi
echo "test_format: ${#files[@]} sources as .clang-format lays them out ($fmt, version $WANT_MAJOR)"
