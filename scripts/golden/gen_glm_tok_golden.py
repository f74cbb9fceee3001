#!/usr/bin/env python3
"""Generates the GLM Chinese tokenizer goldens in tests/golden/tok/ (glm_*.tsv) with GLM's own
tokenizer code, FlagAI's GLMLargeChTokenizer (flagai/data/tokenizer/glm_large_ch/ over
flagai/data/tokenizer/tokenizer.py's GLMTokenizer), so that tests/test_tok_glm.c can check
tokenizers/tok_glm.c without Python. The model is assets/glm-chinese-spm/cog-pretrain.model; the
46 test inputs are tests/data/tokenizer-test-vectors' (only files inside the repository are read).

Nothing is reimplemented and no FlagAI source is copied: the two modules are executed straight
from FlagAI's wheel (the package's other imports, and its heavy dependencies, are not needed, so
the parent packages are empty stand-ins and flagai.model.file_utils, used only when no vocab path
is given, is a stub: flagai_wheel.exec_flagai_modules). Get the wheel without installing it:

    pip download flagai==1.8.0 --no-deps -d /tmp/flagai
    /usr/bin/python3 scripts/golden/gen_glm_tok_golden.py /tmp/flagai/flagai-1.8.0-py3-none-any.whl

/usr/bin/python3 is Debian's, with python3-sentencepiece 0.1.97 (the libsentencepiece the C code
links) and torch (glm_large_ch_tokenizer.py imports it).

The tokenizer is built with FlagAI's defaults (add_block_symbols=True, add_task_mask=True,
add_decoder_mask=False, fix_command_token=True): the layout of GLM-large-chinese.

Files written (ids space-separated):
  glm_extra.tsv   hex(utf-8 input) TAB EncodeAsIds(input) TAB hex(DecodeIds(ids)): the 46
                  llama.cpp test inputs, Chinese/English/mixed text, newlines, command tokens in
                  the text (with and without spaces around), full-width punctuation, numbers,
                  emoji, NFKC cases, and seeded random mixes of all of these
  glm_decode.tsv  ids TAB hex(DecodeIds(ids)): seeded random id runs mixing pieces, <unk> (0),
                  <s>/</s> (1, 2), <n> (3) and the command tokens
  glm_alt.tsv     flags TAB hex(input) TAB ids: other flag combinations (fix_command_token=False,
                  add_task_mask=False, add_block_symbols=False, add_decoder_mask=True)
"""
import os
import platform
import random
import sys

import sentencepiece

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flagai_wheel import exec_flagai_modules  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "tok")
MODEL = os.path.join(ROOT, "assets", "glm-chinese-spm", "cog-pretrain.model")
VEC_INP = os.path.join(ROOT, "tests", "data", "tokenizer-test-vectors", "ggml-vocab-gpt-2.gguf.inp")

TOKENIZER_PY = "flagai/data/tokenizer/tokenizer.py"
GLM_CH_PY = "flagai/data/tokenizer/glm_large_ch/glm_large_ch.py"
GLM_CH_TOK_PY = "flagai/data/tokenizer/glm_large_ch/glm_large_ch_tokenizer.py"


def load_flagai_glm_tokenizer(flagai):
    return exec_flagai_modules(flagai, ["flagai.data.tokenizer.glm_large_ch"], [
        ("flagai.data.tokenizer.tokenizer", TOKENIZER_PY),
        ("flagai.data.tokenizer.glm_large_ch.glm_large_ch", GLM_CH_PY),
        ("flagai.data.tokenizer.glm_large_ch.glm_large_ch_tokenizer", GLM_CH_TOK_PY),
    ]).GLMLargeChTokenizer


def hexs(s):
    return s.encode("utf-8").hex()


def cases(rng):
    with open(VEC_INP, encoding="utf-8") as f:
        out = f.read().split("\n__ggml_vocab_test__\n")[:-1]
    out += [
        "今天吃饭吃了肯德基", "Hello world, 你好世界", "北京故宫是中国[MASK]非物质文化遗产。",
        "问题：啤酒伤胃吗？回答：[gMASK]", "人工智能是一个以计算机科学为基础，由计算机、数学、哲学等多学科交叉融合的交叉学科，[sMASK]，具有非常巨大的前景。",
        "[CLS]今天天气很好[SEP]明天下雨[SEP]", "[CLS] 今天 [MASK] 很好 [SEP]", "今天   [MASK]", "今天\t\n[MASK]",
        "今天\u3000[MASK]", "今天 [sMASK] 明天 [gMASK] 后天", "[MASK][MASK][MASK]", " [MASK] ", "[MASK]",
        "<|endoftext|>", "文本<|endoftext|>", "文本 <|endoftext|> 文本", "<|startofpiece|>生成<|endofpiece|>",
        "[UNK]", "[unk]", "[MASK", "MASK]", "[[MASK]]", "<|endoftext|", "[gMASK][sMASK]", "[dBLOCK]",
        "第一行\n第二行", "第一行\n\n第二行", "第一行<n>第二行", "<n>", "\n", "\r\n", "  ", "\t", "\u3000", "",
        "，。！？；：“”‘’（）【】《》", "ＡＢＣａｂｃ１２３", "①②③", "㈱", "ﬁ", "Ⅻ", "½", "ｶﾀｶﾅ", "カタカナ",
        "2023年12月31日", "3.14159", "1,000,000", "100%", "-42", "0x1F", "１２３４５",
        "emoji 😀👍🏽🇨🇳", "😀", "表情😀包", "中文English混合mixed文本", "GLM-large-ch 是智源的模型",
        "𠀀𠀁", "龘靐齉", "繁體中文測試", "한국어", "日本語のテキスト", "Ελληνικά", "русский текст",
        "café naïve", "e\u0301", "tab\tseparated\ttext", "a  b   c", "   leading", "trailing   ",
        "http://www.example.com/path?q=1", "user@example.com", "C++ and C#", "<html><body>", "{\"k\": [1, 2]}",
        "他说：“你好！”", "『引用』「引用」", "……——", "·", "～", "￥100", "$100", "€100",
    ]
    pieces = ["今天", "天气", "很好", "我们", "北京", "中国", "人工智能", "的", "是", "，", "。", "？", "！", "：",
              "Hello", "world", "GLM", "model", " ", "  ", "\n", "\t", "\u3000", "123", "４５", "😀", "🇨🇳",
              "[MASK]", "[sMASK]", "[gMASK]", "[CLS]", "[SEP]", "[UNK]", "<|endoftext|>", "<|startofpiece|>",
              "<|endofpiece|>", "<n>", "龘", "é", "ﬁ", "（", "）", "《", "》", "、", "a", "b", "-", ".", "'"]
    while len(out) < 300:
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    flagai = sys.argv[1]
    Tok = load_flagai_glm_tokenizer(flagai)
    tok = Tok(vocab_path=MODEL)  # FlagAI's defaults
    rng = random.Random(20231122)

    rows = []
    for text in cases(rng):
        ids = list(tok.EncodeAsIds(text))
        rows.append("%s\t%s\t%s" % (hexs(text), " ".join(map(str, ids)), hexs(tok.DecodeIds(ids))))
    with open(os.path.join(OUT, "glm_extra.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    cmd_ids = sorted({c.Id for c in tok._command_tokens})
    rows = []
    for _ in range(200):
        ids = []
        for _ in range(rng.randint(1, 16)):
            r = rng.random()
            ids.append(rng.choice(cmd_ids) if r < 0.2 else rng.randint(0, 3) if r < 0.3 else rng.randint(4, 49999))
        rows.append("%s\t%s" % (" ".join(map(str, ids)), hexs(tok.DecodeIds(ids))))
    with open(os.path.join(OUT, "glm_decode.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    alt_texts = ["[CLS]北京<|startofpiece|>故宫<|endofpiece|>", "今天 [MASK] 明天 [sMASK] 后天 [gMASK]",
                 "[dBLOCK] 块 [UNK]"]
    rows = []
    for flags in [(True, True, False, False), (True, False, False, True), (False, True, False, True),
                  (True, True, True, True)]:
        t = Tok(vocab_path=MODEL, add_block_symbols=flags[0], add_task_mask=flags[1], add_decoder_mask=flags[2],
                fix_command_token=flags[3])
        name = "block=%d,task=%d,decoder=%d,fix=%d" % flags
        for text in alt_texts:
            rows.append("%s\t%s\t%s" % (name, hexs(text), " ".join(map(str, t.EncodeAsIds(text)))))
    with open(os.path.join(OUT, "glm_alt.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    print("flagai %s (%s), sentencepiece %s, Python %s" % (
        os.path.basename(flagai), "GLMLargeChTokenizer", sentencepiece.__version__, platform.python_version()))
    print({c.name: c.Id for c in tok._command_tokens})


if __name__ == "__main__":
    main()
