#!/usr/bin/env bash
# The documentation against what it describes, so that it cannot drift:
#   1. each program page docs/PROGRAM.md holds, under "## Options", one ```text block equal to
#      the program's --help output, byte for byte (a short diff on failure);
#   2. every relative link in README.md and docs/*.md points at a file or folder that exists,
#      and a link's #anchor into a .md file at a heading there (GitHub's rule: lowercase,
#      spaces to '-', punctuation other than '-' and '_' dropped);
#   3. README.md has at most 250 lines, and its "## The two commands" section holds exactly
#      two one-line ```sh blocks (what .ci/run parses).
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
PROGRAMS=(gpt2-classify gpt2-finetune bert-classify t5-finetune glm-finetune tz-convert tz-tokenize)
README_MAX_LINES=250
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$SRC/tests/cli_lib.sh"

# ---------------------------------------------------------------- 1. Options = --help
# options_block PAGE: the first ```text block between "## Options" and the next "## " heading
options_block() {
    awk '/^## Options[[:space:]]*$/ {on = 1; next}
         on && !inb && /^## / {exit}
         on && !inb && /^```text[[:space:]]*$/ {inb = 1; next}
         inb && /^```[[:space:]]*$/ {exit}
         inb {print}' "$1"
}
for prog in "${PROGRAMS[@]}"; do
    page="docs/$prog.md"
    if [ ! -f "$SRC/$page" ]; then
        bad "$page is missing"
        continue
    fi
    if [ ! -x "$BIN/$prog" ]; then
        bad "$page: $BIN/$prog is not built, so its --help cannot be compared"
        continue
    fi
    options_block "$SRC/$page" > "$TMP/doc.txt"
    if [ ! -s "$TMP/doc.txt" ]; then
        bad "$page has no \`\`\`text block under \"## Options\""
        continue
    fi
    if ! "$BIN/$prog" --help > "$TMP/help.txt" 2> "$TMP/help.err"; then
        bad "$page: $prog --help failed: $(head -n 1 "$TMP/help.err")"
        continue
    fi
    if cmp -s "$TMP/help.txt" "$TMP/doc.txt"; then
        ok
    else
        bad "$page: the Options block differs from \`$prog --help\` (- the page, + --help):"
        diff -u --label "$page" --label "$prog --help" "$TMP/doc.txt" "$TMP/help.txt" | sed -n '3,22p' >&2
    fi
done

# ---------------------------------------------------------------- 2. links
# links FILE: the target of every inline link [text](target) outside code (fenced blocks and
# `spans`, which may run over a line break), one per line
links() {
    awk '/^[[:space:]]*```/ {fence = !fence; next}
         !fence {text = text $0 "\n"}
         END {
             gsub(/`[^`]*`/, "", text)
             while (match(text, /\]\([^) \t\n]+/)) {
                 print substr(text, RSTART + 2, RLENGTH - 2)
                 text = substr(text, RSTART + RLENGTH)
             }
         }' "$1"
}
# anchors FILE: GitHub's anchor of every heading outside fenced blocks, one per line
anchors() {
    awk '/^[[:space:]]*```/ {fence = !fence; next}
         !fence && /^#+ / {sub(/^#+ +/, ""); sub(/ +#* *$/, ""); print}' "$1" |
        tr '[:upper:]' '[:lower:]' | LC_ALL=C sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}
for md in "$SRC/README.md" "$SRC"/docs/*.md; do
    rel=${md#"$SRC"/}
    dir=$(dirname "$md")
    nlinks=0
    while IFS= read -r target; do
        nlinks=$((nlinks + 1))
        case "$target" in
        http://* | https://* | mailto:*) continue ;;
        esac
        path=${target%%#*}
        anchor=
        [ "$path" != "$target" ] && anchor=${target#*#}
        if [ -z "$path" ]; then
            file=$md
        else
            file="$dir/$path"
        fi
        if [ ! -e "$file" ]; then
            bad "$rel: the link ($target) points at $path, which does not exist"
            continue
        fi
        if [ -n "$anchor" ]; then
            case "$file" in
            *.md)
                if anchors "$file" | grep -qxF -- "$anchor"; then
                    ok
                else
                    bad "$rel: the link ($target) names #$anchor, which is no heading of ${path:-$rel}"
                fi
                ;;
            *) ok ;;
            esac
        else
            ok
        fi
    done < <(links "$md")
    [ "$rel" = README.md ] && [ "$nlinks" -eq 0 ] && bad "README.md links to no page: the link check found nothing"
done

# ---------------------------------------------------------------- 3. README's shape
lines=$(wc -l < "$SRC/README.md")
if [ "$lines" -le "$README_MAX_LINES" ]; then
    ok
else
    bad "README.md has $lines lines, more than $README_MAX_LINES: move the detail to a page in docs/"
fi
# per ```sh block of the section: its line count (the section ends at the next "## " heading)
blocks=$(awk '/^## The two commands/ {on = 1; next} on && /^## / {exit}
              on && !code && /^```sh/ {code = 1; n = 0; next}
              on && code && /^```/ {code = 0; print n; next}
              on && code {n++}' "$SRC/README.md" | tr '\n' ' ')
if [ "$blocks" = "1 1 " ]; then
    ok
else
    bad "README.md: \"## The two commands\" must hold exactly two one-line \`\`\`sh blocks (.ci/run runs them); its sh blocks have these line counts: ${blocks:-none}"
fi

finish test_docs
