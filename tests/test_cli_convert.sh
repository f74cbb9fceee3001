#!/usr/bin/env bash
# tz-convert end to end:
#   - import, reshard 1 -> 2 -> 4 -> 1 is bit-exact, and export is byte-for-byte the file that
#     scripts/golden/gen_convert_export_golden.py checked loads in Transformers with identical
#     outputs (tests/golden/convert/export.tsv), for GPT-2, BERT, RoBERTa, T5 v1.0 and v1.1;
#   - every HF file layout (.bin, sharded .bin, sharded safetensors) imports to the same folder
#     as model.safetensors;
#   - Megatron-LM rank files (tp 2 with args, tp 1 without) export to exactly the GPT-2 tensors
#     they were made from, and FlagAI's model-parallel GLM files import to the same folder as
#     its single file;
#   - a training program reads a sharded folder (any tp) with the same result as the HF folder;
#   - hostile and broken inputs: one-line errors, exit 1, nothing left behind.
set -u
BIN_DIR="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
BIN="$BIN_DIR/tz-convert"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$FIXTURES/tiny-gpt2/model.safetensors"
G="$SRC/tests/golden"
C="$G/convert"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_convert: $BIN not built"; exit 1; }
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...

run() { "$BIN" "$@" > "$TMP/out" 2> "$TMP/err"; }
# the tensor lines of inspect (name dtype shape crc), sorted, without the header and total lines
tensors() { "$BIN" inspect "$1" | awk 'NF == 4 && $4 ~ /^[0-9a-f]+$/ {print $1, $2, $3, $4}' | sort; }

# --- round trips, byte-stable exports ---
while IFS=$'\t' read -r name sha size; do
    case "$name" in '#'*) continue ;; esac
    d="$TMP/$name"
    run import "$G/$name" "$d-1" --tp 1 && run reshard "$d-1" "$d-2" --tp 2 && run reshard "$d-2" "$d-4" --tp 4 &&
        run reshard "$d-4" "$d-1b" --tp 1 && ok || { bad "$name: import/reshard failed"; continue; }
    cmp -s "$d-1/rank-00-of-01.tzck" "$d-1b/rank-00-of-01.tzck" && ok || bad "$name: 1 -> 2 -> 4 -> 1 is not bit-exact"
    run verify "$d-4" && grep -q "OK: .* on 4 ranks" "$TMP/out" && ok || bad "$name: verify of the tp-4 folder"
    run export "$d-1b" "$d-hf" || { bad "$name: export failed"; continue; }
    got=$(sha256sum "$d-hf/model.safetensors" | cut -d' ' -f1)
    [ "$got" = "$sha" ] && ok || bad "$name: export is not the file HF was checked with (sha256 $got)"
    cmp -s "$G/$name/config.json" "$d-hf/config.json" && ok || bad "$name: config.json not carried through"
    # the export holds the source's tensors bit for bit
    [ "$(tensors "$G/$name/model.safetensors")" = "$(tensors "$d-hf/model.safetensors")" ] && ok ||
        bad "$name: exported tensors differ from the source's"
done < "$C/export.tsv"

# --- bf16 storage: resharding stays bit-exact, and the export is BF16 safetensors ---
run import "$G/gpt2-tiny-cls" "$TMP/bf-1" --dtype bf16 && run reshard "$TMP/bf-1" "$TMP/bf-2" --tp 2 &&
    run reshard "$TMP/bf-2" "$TMP/bf-1b" --tp 1 && run export "$TMP/bf-1b" "$TMP/bf-hf" || bad "bf16: import/reshard/export"
cmp -s "$TMP/bf-1/rank-00-of-01.tzck" "$TMP/bf-1b/rank-00-of-01.tzck" && ok || bad "bf16: 1 -> 2 -> 1 is not bit-exact"
[ "$(tensors "$TMP/bf-hf/model.safetensors" | awk '$2 != "BF16"' | wc -l)" -eq 0 ] && ok || bad "bf16: the export is not all BF16"

# --- every HF file layout imports to the same tensors ---
same_import() { # NAME REFERENCE_SOURCE SOURCE
    run import "$2" "$TMP/ref-$1" --tp 2 && run import "$3" "$TMP/alt-$1" --tp 2 || { bad "$1: import failed"; return; }
    [ "$(tensors "$TMP/ref-$1")" = "$(tensors "$TMP/alt-$1")" ] && ok || bad "$1: imports differ"
}
same_import bert-bin "$G/bert-tiny-cls" "$C/bert-tiny-cls-bin"
same_import roberta-st-sharded "$G/roberta-tiny-cls" "$C/roberta-tiny-cls-st-sharded"
same_import t5-bin-sharded "$G/t5-tiny-v1_0" "$C/t5-tiny-v1_0-bin-sharded"
same_import t5-st-sharded "$G/t5-tiny-v1_1" "$C/t5-tiny-v1_1-st-sharded"
same_import gpt2-bin "$FIXTURES/tiny-gpt2" "$G/torch-ckpt/gpt2-bin"
same_import gpt2-bin-sharded "$FIXTURES/tiny-gpt2" "$G/torch-ckpt/gpt2-bin-sharded"
same_import gpt2-st-sharded "$FIXTURES/tiny-gpt2" "$G/torch-ckpt/gpt2-st-sharded"

# --- Megatron-LM and FlagAI ---
tensors "$G/gpt2-tiny-cls/model.safetensors" | grep -v '^score\.' > "$TMP/gpt2-tensors"
run import "$C/megatron-gpt2-tp2" "$TMP/meg2" --vocab-size 1000 && run export "$TMP/meg2" "$TMP/meg2-hf" ||
    bad "megatron tp2: import/export failed"
[ "$(tensors "$TMP/meg2-hf/model.safetensors")" = "$(cat "$TMP/gpt2-tensors")" ] && ok ||
    bad "megatron tp2: the export is not the GPT-2 it was made from"
grep -q '"n_head":.*4' "$TMP/meg2-hf/config.json" && grep -q '"activation_function":.*"gelu"' "$TMP/meg2-hf/config.json" &&
    ok || bad "megatron tp2: config.json not built from the checkpoint's args"
run import "$C/megatron-gpt2-tp1-noargs" "$TMP/meg1" --hf-config "$G/gpt2-tiny-cls/config.json" --tp 2 &&
    run export "$TMP/meg1" "$TMP/meg1-hf" || bad "megatron tp1 without args: import/export failed"
[ "$(tensors "$TMP/meg1-hf/model.safetensors")" = "$(cat "$TMP/gpt2-tensors")" ] && ok ||
    bad "megatron tp1: the export is not the GPT-2 it was made from"
expect_fail "megatron without args or --hf-config" 1 "pass --hf-config" tz-convert import "$C/megatron-gpt2-tp1-noargs" "$TMP/x"
run import "$C/glm-flagai" "$TMP/glm" --arch glm && run import "$C/glm-flagai-mp2" "$TMP/glm-mp" --arch glm ||
    bad "glm: import failed"
cmp -s "$TMP/glm/rank-00-of-01.tzck" "$TMP/glm-mp/rank-00-of-01.tzck" && ok || bad "glm: mp=2 files import differently"
# export writes FlagAI's own layout back: pytorch_model.bin holding {'module': ...}, the same
# tensors in the same order (a reshard to tp 2 between), and it imports again unchanged
run reshard "$TMP/glm" "$TMP/glm-2" --tp 2 && run export "$TMP/glm-2" "$TMP/glm-flagai-out" &&
    run import "$TMP/glm-flagai-out" "$TMP/glm-again" || bad "glm: reshard/export/import failed"
[ "$("$BIN" inspect "$C/glm-flagai/pytorch_model.bin" | awk 'NF == 4 && $4 ~ /^[0-9a-f]+$/ {print $1, $2, $3, $4}')" = \
  "$("$BIN" inspect "$TMP/glm-flagai-out/pytorch_model.bin" | awk 'NF == 4 && $4 ~ /^[0-9a-f]+$/ {print $1, $2, $3, $4}')" ] &&
    ok || bad "glm: the exported pytorch_model.bin differs from FlagAI's (names, order, dtypes, shapes or bytes)"
cmp -s "$TMP/glm/rank-00-of-01.tzck" "$TMP/glm-again/rank-00-of-01.tzck" && ok || bad "glm: export + import is not the identity"
# FlagAI's {'module': ...} tensors are ours as they are (the GLM table maps names one to one)
[ "$("$BIN" inspect "$C/glm-flagai/pytorch_model.bin" | awk 'NF == 4 && $4 ~ /^[0-9a-f]+$/ {sub(/^module\./, "", $1); print $1, $4}' | sort)" = \
  "$("$BIN" inspect "$TMP/glm" | awk 'NF == 5 {print $1, $5}' | sort)" ] && ok || bad "glm: tensors differ from FlagAI's"

# --- a training program reads sharded folders at any tp ---
mkdir -p "$TMP/data"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
expect_fail "tp that does not divide the heads (import)" 1 "does not divide" tz-convert import "$FIXTURES/tiny-gpt2" "$TMP/y" --tp 4
run import "$FIXTURES/tiny-gpt2" "$TMP/tg2" --tp 2 || bad "tiny-gpt2 import"
for m in "$FIXTURES/tiny-gpt2" "$TMP/tg2"; do
    "$BIN_DIR/gpt2-classify" --model "$m" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --threads 2 --max-steps 3 \
        --save-dir "$TMP/run-$(basename "$m")" 2> "$TMP/err" | grep "dev results" > "$TMP/dev-$(basename "$m")"
done
[ -s "$TMP/dev-tg2" ] && cmp -s "$TMP/dev-tiny-gpt2" "$TMP/dev-tg2" && ok ||
    bad "gpt2-classify on the sharded folder: $(cat "$TMP/dev-tg2") vs $(cat "$TMP/dev-tiny-gpt2")"
expect_fail "a BERT folder given to gpt2-classify" 1 "holds a bert model" tz-convert import "$TMP/bert-tiny-cls-4" "$TMP/x" --arch gpt2

# output folders get the umask's mode, not mkdtemp's private 0700 (import, reshard and export)
"$BIN" reshard "$TMP/tg2" "$TMP/mode-reshard" --tp 1 > /dev/null 2>&1
"$BIN" export "$TMP/tg2" "$TMP/mode-export" > /dev/null 2>&1
want_mode=$(printf '%o' $((0777 & ~0$(umask))))
[ "$(stat -c %a "$TMP/tg2" "$TMP/mode-reshard" "$TMP/mode-export" 2> /dev/null | sort -u)" = "$want_mode" ] && ok ||
    bad "output folder modes: $(stat -c '%a %n' "$TMP/tg2" "$TMP/mode-reshard" "$TMP/mode-export" 2>&1 | tr '\n' ' ')"

# --- hostile and broken inputs ---
expect_fail "pickle calling posix.system" 1 "refusing pickle GLOBAL 'posix.system'" tz-convert import "$G/torch-ckpt/hostile_posix_system.pt" "$TMP/x" --arch gpt2
expect_fail "pickle calling os.system (inspect)" 1 "refusing pickle GLOBAL 'os.system'" tz-convert inspect "$G/torch-ckpt/hostile_os_system.pt"
expect_fail "legacy torch format" 1 "legacy" tz-convert inspect "$G/torch-ckpt/small_legacy.pt"
ST="$G/gpt2-tiny-cls/model.safetensors"
head -c 5000 "$ST" > "$TMP/truncated.safetensors"
expect_fail "truncated safetensors" 1 "truncated.safetensors" tz-convert inspect "$TMP/truncated.safetensors"
printf '\xff\xff\xff\xff\xff\xff\x00\x00{}' > "$TMP/huge.safetensors"
expect_fail "huge header length" 1 "huge.safetensors" tz-convert inspect "$TMP/huge.safetensors"
hdr='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
{ printf "$(printf '\\x%02x' ${#hdr})\0\0\0\0\0\0\0"; printf '%s' "$hdr"; head -c 12 /dev/zero; } > "$TMP/overlap.safetensors"
expect_fail "overlapping offsets" 1 "overlap" tz-convert inspect "$TMP/overlap.safetensors"
hdr='{"a":{"dtype":"Q8","shape":[2],"data_offsets":[0,2]}}'
{ printf "$(printf '\\x%02x' ${#hdr})\0\0\0\0\0\0\0"; printf '%s' "$hdr"; head -c 2 /dev/zero; } > "$TMP/dtype.safetensors"
expect_fail "unknown dtype string" 1 "Q8" tz-convert inspect "$TMP/dtype.safetensors"
hdr='{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}'
{ printf "$(printf '\\x%02x' ${#hdr})\0\0\0\0\0\0\0"; printf '%s' "$hdr"; head -c 8 /dev/zero; } > "$TMP/overflow.safetensors"
expect_fail "shape product overflows" 1 "overflow.safetensors" tz-convert inspect "$TMP/overflow.safetensors"
# a sharded folder whose data or manifest was changed
cp -r "$TMP/gpt2-tiny-cls-2" "$TMP/flip"
printf '\x01' | dd of="$TMP/flip/rank-01-of-02.tzck" bs=1 seek=300 conv=notrunc 2> /dev/null
expect_fail "a flipped byte in a rank file" 1 "CRC mismatch" tz-convert verify "$TMP/flip"
cp -r "$TMP/gpt2-tiny-cls-2" "$TMP/man"
sed -i '0,/"crc32":\t\["[0-9a-f]*"/s//"crc32":\t["00000000"/' "$TMP/man/tz-manifest.json"
expect_fail "a changed manifest checksum" 1 "the manifest says 00000000" tz-convert verify "$TMP/man"
cp -r "$TMP/gpt2-tiny-cls-2" "$TMP/cfg"
echo ' ' >> "$TMP/cfg/config.json"
expect_fail "a changed config.json" 1 "config.json: checksum" tz-convert verify "$TMP/cfg"
expect_fail "output exists" 1 "already exists" tz-convert import "$G/gpt2-tiny-cls" "$TMP/gpt2-tiny-cls-1"
expect_fail "missing source" 1 "cannot" tz-convert import "$TMP/nope" "$TMP/y" --arch gpt2
expect_fail "unknown arch" 1 "not supported" tz-convert import "$G/gpt2-tiny-cls" "$TMP/y" --arch llama
expect_fail "tp that does not divide the heads" 1 "does not divide" tz-convert reshard "$TMP/gpt2-tiny-cls-1" "$TMP/y" --tp 3
[ -z "$(ls -d "$TMP"/y* "$TMP"/x* 2> /dev/null)" ] && ok || bad "a failed conversion left files behind: $(ls -d "$TMP"/y* "$TMP"/x*)"
# a file-size limit (a full disk's stand-in) during each command: one line naming the file, exit 1,
# no partial folder left (issue 34: SIGXFSZ killed it without a word)
for cmd in "import $G/gpt2-tiny-cls $TMP/lim-i" "reshard $TMP/gpt2-tiny-cls-1 $TMP/lim-r --tp 2" \
    "export $TMP/gpt2-tiny-cls-1 $TMP/lim-e"; do
    # shellcheck disable=SC2086
    (ulimit -f 100 && exec "$BIN" $cmd > /dev/null 2> "$TMP/err")
    rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "File too large" "$TMP/err" &&
        [ -z "$(ls "$TMP" | grep '^lim-.*partial')" ] && ok || bad "${cmd%% *} under a file-size limit: exit $rc"
done
"$BIN" frobnicate a b > /dev/null 2>&1; [ $? -eq 2 ] && ok || bad "an unknown command is a usage error (exit 2)"
"$BIN" --help | grep -q "reshard IN OUT" && ok || bad "--help lists the commands"

finish test_cli_convert
