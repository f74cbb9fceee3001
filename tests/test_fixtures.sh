#!/usr/bin/env bash
# The test fixtures are what their SOURCES.md says: every file under tests/data/ is listed in its
# folder's SOURCES.md with the bytes and sha256 that scripts/golden/make_test_data.py wrote, and
# every listed file is there with those bytes. A fixture edited by hand, truncated or left out
# of git fails here with its name, before the tests that read it fail in stranger ways.
set -u
. "$(dirname "$0")/fixtures.sh"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'FAILED: %s\n' "$1" >&2; }

need_fixture "$FIXTURES/README.md"
for sources in "$FIXTURES"/*/SOURCES.md; do
    dir=$(dirname "$sources")
    folder=$(basename "$dir")
    grep -q "^| $folder/ |" "$FIXTURES/README.md" && ok || bad "$folder is not in tests/data/README.md"
    # the fixture table: | file | what | bytes | sha256 | sha256 of the full file |, up to the first blank line
    listed=$(awk '/^\| file \| what \|/ {on = 1; next} on && /^$/ {exit} on && /^\| [^-]/ {print}' "$sources")
    [ -n "$listed" ] && ok || bad "$sources: no fixture table"
    while IFS='|' read -r _ file _ bytes sha _; do
        file=$(echo "$file" | xargs) bytes=$(echo "$bytes" | xargs) sha=$(echo "$sha" | xargs)
        if [ ! -f "$dir/$file" ]; then bad "$folder/$file: listed in SOURCES.md but missing"; continue; fi
        [ "$(stat -c %s "$dir/$file")" = "$bytes" ] && ok || bad "$folder/$file: $(stat -c %s "$dir/$file") bytes, SOURCES.md says $bytes"
        [ "$(sha256sum < "$dir/$file" | cut -d' ' -f1)" = "$sha" ] && ok || bad "$folder/$file: sha256 differs from SOURCES.md"
    done <<< "$listed"
    while read -r f; do
        rel=${f#"$dir/"}
        [ "$rel" = SOURCES.md ] && continue
        grep -q "^| $rel |" <<< "$listed" && ok || bad "$folder/$rel is not listed in its SOURCES.md"
    done < <(find "$dir" -type f | sort)
done
echo "test_fixtures: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
