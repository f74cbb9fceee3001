#!/usr/bin/env bash
# The parsers' libFuzzer targets (tests/fuzz/), each built with clang (ASan + UBSan) and run for
# a bounded time from a seed corpus: a crash, a sanitizer report or a leak fails the test. The
# fuzzer's own output is kept on failure. FUZZ_SECONDS sets the time per target (default 10).
# C++ sources (tokenizers/tok_spm.cc over libsentencepiece) are compiled with clang++ and then
# the target links with clang++.
set -u
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$FIXTURES/tiny-gpt2/model.safetensors"
SECONDS_EACH="${FUZZ_SECONDS:-10}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v clang > /dev/null || { echo "FAILED: test_fuzz_smoke: no clang (scripts/setup.sh installs it)" >&2; exit 1; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' > "$TMP/probe.c"
clang -fsanitize=fuzzer "$TMP/probe.c" -o "$TMP/probe" 2> /dev/null \
    || { echo "FAILED: test_fuzz_smoke: clang has no libFuzzer (scripts/setup.sh installs libclang-rt-dev)" >&2; exit 1; }
cd "$SRC"
CFLAGS=(-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I.)
CXXFLAGS=(-std=c++17 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -I.)
CKPT=(runtime/base/rt_json.c runtime/base/rt_atomic.c checkpoints/ckpt_safetensors.c checkpoints/ckpt_native.c
      checkpoints/ckpt_name_index.c checkpoints/ckpt_pages.c runtime/base/rt_status.c runtime/base/rt_dtype.c runtime/base/rt_log.c
      runtime/base/rt_fs.c runtime/base/rt_mapped.c)
pass=0
fail=0
# name, seed files (a folder or files; may be empty), then the sources after --; an argument
# that starts with '-' is a link flag, a .cc file is compiled with clang++ first. Every target
# links runtime/base/rt_buf.c (the growable arrays and text every parser uses) and rt_status.c.
fuzz() {
    local name=$1 seeds=$2 src cxx_objs=() c_srcs=(runtime/base/rt_buf.c) flags=() libs=(-lcjson -lz -lm)
    shift 3
    for src in "$@"; do
        case $src in
        -*) flags+=("$src") ;;
        *.cc)
            local obj="$TMP/${name}_$(basename "$src" .cc).o"
            if ! clang++ "${CXXFLAGS[@]}" -c "$src" -o "$obj" 2>> "$TMP/$name.build"; then
                fail=$((fail + 1)); echo "FAILED: $name does not build:" >&2; tail -5 "$TMP/$name.build" >&2; return
            fi
            cxx_objs+=("$obj") ;;
        *) c_srcs+=("$src") ;;
        esac
    done
    local link=(clang "${CFLAGS[@]}" "tests/fuzz/$name.c" "${c_srcs[@]}")
    if [ ${#cxx_objs[@]} -gt 0 ]; then
        link=(clang++ -x c "${CFLAGS[@]}" "tests/fuzz/$name.c" "${c_srcs[@]}" -x none "${cxx_objs[@]}")
    fi
    if ! "${link[@]}" "${flags[@]}" "${libs[@]}" -o "$TMP/$name" 2>> "$TMP/$name.build"; then
        fail=$((fail + 1)); echo "FAILED: $name does not build:" >&2; tail -5 "$TMP/$name.build" >&2; return
    fi
    mkdir -p "$TMP/corpus_$name"
    [ -n "$seeds" ] && cp -r $seeds "$TMP/corpus_$name/" 2> /dev/null
    if (cd "$TMP" && "./$name" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
            "corpus_$name" > "$name.log" 2>&1); then
        pass=$((pass + 1)); echo "$name: $(grep -o 'Done [0-9]* runs' "$TMP/$name.log" | tail -1)"
    else
        fail=$((fail + 1)); echo "FAILED: $name found a bug:" >&2; grep -E "ERROR|SUMMARY|runtime error" "$TMP/$name.log" | head -5 >&2
        cp "$TMP"/crash-* "$TMP"/leak-* "$TMP"/timeout-* /tmp/ 2> /dev/null && echo "    (the input is in /tmp)" >&2
    fi
}
fuzz fuzz_ckpt_safetensors "$FIXTURES/tiny-gpt2/model.safetensors" -- "${CKPT[@]}"
fuzz fuzz_ckpt_native "" -- "${CKPT[@]}"
fuzz fuzz_ckpt_pickle "tests/fuzz/corpus/fuzz_ckpt_pickle/." -- checkpoints/ckpt_pickle.c runtime/base/rt_status.c \
    runtime/base/rt_dtype.c
fuzz fuzz_ckpt_zip "tests/fuzz/corpus/fuzz_ckpt_zip/." -- checkpoints/ckpt_zip.c checkpoints/ckpt_torch.c \
    checkpoints/ckpt_pickle.c checkpoints/ckpt_name_index.c checkpoints/ckpt_pages.c runtime/base/rt_status.c \
    runtime/base/rt_dtype.c runtime/base/rt_mapped.c
fuzz fuzz_data_tsv "assets/glue-mrpc/dev.tsv" -- data/data_tsv.c runtime/base/rt_status.c runtime/base/rt_utf8.c
fuzz fuzz_data_csv "tests/fuzz/corpus/fuzz_data_csv/." -- data/data_csv.c data/data_tsv.c runtime/base/rt_status.c \
    runtime/base/rt_utf8.c runtime/base/rt_fs.c
fuzz fuzz_data_table "tests/fuzz/corpus/fuzz_data_table/." -- data/data_table.c data/data_user.c data/data_csv.c \
    data/data_tsv.c data/data_jsonl.c data/data_glue.c runtime/base/rt_json.c runtime/base/rt_status.c runtime/base/rt_utf8.c \
    runtime/base/rt_fs.c -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc
# gpt2.c and bert.c also hold the models: unused sections are dropped (start-stop-gc, or the
# sanitizers' metadata would keep them) so that their backend code need not be linked
fuzz fuzz_json "tests/fuzz/corpus/fuzz_json/." -- runtime/base/rt_json.c runtime/base/rt_atomic.c \
    models/layers/hf_config.c models/gpt2/gpt2.c models/bert/bert.c models/t5/t5_config.c models/glm/glm_config.c runtime/base/rt_status.c \
    runtime/base/rt_fs.c -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc
fuzz fuzz_tok_load "tests/fuzz/corpus/fuzz_tok_load/." -- tokenizers/tok.c tokenizers/tok_bpe.c tokenizers/tok_file.c \
    tokenizers/tok_glm.c tokenizers/tok_glm_en.c tokenizers/tok_load.c tokenizers/tok_t5.c tokenizers/tok_text.c \
    tokenizers/tok_unicode.c tokenizers/tok_vocab.c tokenizers/tok_wordpiece.c tokenizers/tok_spm.cc runtime/base/rt_status.c \
    runtime/base/rt_utf8.c runtime/base/rt_fs.c -lsentencepiece
fuzz fuzz_data_superglue "tests/fuzz/corpus/fuzz_data_superglue/." -- data/data_superglue.c data/data_jsonl.c data/data_pvp.c \
    runtime/base/rt_json.c runtime/base/rt_status.c runtime/base/rt_utf8.c runtime/base/rt_fs.c tokenizers/tok.c tokenizers/tok_text.c \
    tokenizers/tok_unicode.c -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc
fuzz fuzz_data_cache "tests/fuzz/corpus/fuzz_data_cache/." -- data/data_cache.c data/data_cache_format.c \
    data/data_rows.c runtime/base/rt_atomic.c runtime/base/rt_fs.c runtime/base/rt_mapped.c runtime/base/rt_status.c runtime/base/rt_log.c -lz
fuzz fuzz_ckpt_peft "tests/fuzz/corpus/fuzz_ckpt_peft/." -- checkpoints/ckpt_peft.c runtime/base/rt_json.c \
    runtime/base/rt_atomic.c runtime/base/rt_status.c runtime/base/rt_fs.c runtime/base/rt_log.c
echo "test_fuzz_smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
