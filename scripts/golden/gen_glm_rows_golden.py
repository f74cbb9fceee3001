#!/usr/bin/env python3
"""The model inputs FlagAI 1.8.0 builds for GLM's SuperGLUE fine-tuning, for
tests/test_glm_tasks.c: for a few val examples of every task, PVP.encode's output (the token
ids, position and block position ids, the separator, the targets and loss mask, the label and
the verbalizer ids) with the English GLM tokenizer (GLMLargeEnWordPieceTokenizer over
bert-base-uncased's vocab, as gen_glm_en_tok_golden.py builds it), at max_seq_length 128 so that
long BoolQ and MultiRC passages are truncated. Written to tests/golden/superglue/glm_rows.json.
The val files are the in-repo ones gen_superglue_golden.val_path names (tests/data/superglue-*,
COPA's in assets/), which hold every line used here.

FlagAI's own code runs from the wheel (pvp.py, processor.py and data_utils' builders, through
gen_superglue_golden.load_flagai; the tokenizer through gen_glm_en_tok_golden); nothing is
reimplemented. One adapter: this tokenizer's get_command_id returns a CommandToken where
data_utils and pvp.py compare and store ids, so the adapter returns its .Id.

    pip download flagai==1.8.0 --no-deps -d /tmp/flagai
    /usr/bin/python3 scripts/golden/gen_glm_rows_golden.py /tmp/flagai/flagai-1.8.0-py3-none-any.whl
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_glm_en_tok_golden as tok_gen  # noqa: E402
import gen_superglue_golden as sg_gen  # noqa: E402

OUT = os.path.join(sg_gen.ROOT, "tests", "golden", "superglue", "glm_rows.json")
MAX_LEN = 128
# task: val lines (1-based) to encode; the first of BoolQ and MultiRC are long enough to truncate
LINES = {"boolq": [1, 2], "cb": [1, 2], "copa": [1, 5], "multirc": [1], "rte": [1, 3], "wic": [1, 2],
         "wsc": [1, 43]}


class Args:
    task_mask = True
    continuous_prompt = False
    prefix_prompt = 0
    sentinel_token = False
    no_block_position = False
    masked_lm = False
    loss_func = "cross_entropy"


class IdTokenizer:
    """FlagAI's tokenizer with get_command_id giving ids (see the module doc)."""

    def __init__(self, tok):
        self._tok = tok

    def get_command_id(self, name):
        return self._tok.get_command_id(name).Id

    def __getattr__(self, name):
        return getattr(self._tok, name)


def unpadded(sample_ids, sep, loss_mask):
    """The row's real length: the context, then the [sop] and the answer tokens (loss mask 1)."""
    return sep + int(sum(loss_mask))


def main():
    wheel = sys.argv[1] if len(sys.argv) > 1 else "/tmp/flagai-dl/flagai-1.8.0-py3-none-any.whl"
    Tok = tok_gen.load_tokenizer_class(wheel)
    cache = tempfile.mkdtemp()
    os.symlink(tok_gen.VOCAB, os.path.join(cache, "vocab.txt"))
    tok = IdTokenizer(Tok(cache_dir=cache))
    proc, pvp = sg_gen.load_flagai(wheel, builders=True)
    out = {"flagai": "1.8.0", "python": sys.version.split()[0], "max_seq_length": MAX_LEN, "pattern": 0,
           "cases": []}
    for task, (P, V, _) in sg_gen.cases(proc, pvp).items():
        path = sg_gen.val_path(task)
        processor = P.__new__(P)
        exs = processor._create_examples(path, "dev")
        labels = P.get_labels(processor)
        if task == "multirc":  # the first paragraph's first two answer options (long: truncated)
            picks = [(exs[0], 1), (exs[1], 1)]
        else:
            picks = [(exs[ln - 1], ln) for ln in LINES[task]]
        for ex, line in picks:
            v = V(Args(), tok, labels, MAX_LEN, pattern_id=0)
            v.split = "dev"
            s = v.encode(ex)
            # choices (COPA): one row per answer; WSC: one row, its answer labelled; the other
            # tasks: one row whose [sop] is scored against the verbalizer ids in target_ids
            choices = s["input_ids"].ndim == 2
            span = not choices and len(s["target_ids"]) == len(s["input_ids"])
            ids = list(s["input_ids"]) if choices else [s["input_ids"]]
            pos = list(s["position_ids"]) if choices else [s["position_ids"]]
            seps = list(s["attention_mask"]) if choices else [s["attention_mask"]]
            targets = list(s["target_ids"]) if choices else [s["target_ids"]]
            masks = list(s["logit_mask"]) if choices else [s["logit_mask"]] if span else [None]
            rows = []
            for r in range(len(ids)):
                sep = int(seps[r])
                labelled = masks[r] is not None
                mask = list(masks[r]) if labelled else [0] * sep + [1]
                n = unpadded(ids[r], sep, mask)
                rows.append({"ids": [int(x) for x in ids[r][:n]], "pos": [int(x) for x in pos[r][0][:n]],
                             "block_pos": [int(x) for x in pos[r][1][:n]], "sep": sep,
                             "labels": [int(targets[r][i]) if labelled and mask[i] else -100 for i in range(n)]})
            case = {"task": task, "line": line, "idx": ex.idx if task != "multirc" else ex.meta["answer_idx"],
                    "label": int(s["labels"]), "rows": rows}
            if not choices and not span:
                case["verbalizer_ids"] = [int(x) for x in s["target_ids"]]
            out["cases"].append(case)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT, len(out["cases"]), "cases")


if __name__ == "__main__":
    main()
