"""Reference outputs for tests/test_data_superglue.c, from FlagAI 1.8.0's own SuperGLUE code.

Loads flagai/data/dataset/superglue/processor.py and pvp.py out of the FlagAI wheel (never
installed: their heavy imports, torch and deepspeed through data_utils, are replaced by a stub
module holding InputExample and the wheel's own punctuation_standardization), reads the val files
of tests/data/superglue-* (COPA's: assets/superglue-copa) with FlagAI's processors, and for a few
examples per task writes what PVP.get_parts, verbalize and get_answers return for every pattern,
into tests/golden/superglue/pvp_golden.json. The mask slot is written as {"mask": true}. The
fixtures keep every val line a case uses, and a case's "line" is its line in the full val file,
so `--data DIR` (a folder laid out like the project's shared data, superglue-*/val.jsonl) writes
the same file from the full val sets.

It also prints the scikit-learn numbers that the metric test hard-codes (inputs made by the
same integer formulas as the C test).

    python3 scripts/golden/gen_superglue_golden.py /tmp/flagai-dl/flagai-1.8.0-py3-none-any.whl [--data DIR]
"""
import importlib.util
import json
import os
import re
import sys
import types
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data")  # test-only fixtures; --data DIR reads DIR instead
ASSETS = os.path.join(ROOT, "assets")  # superglue-copa's val.jsonl is shipped
OUT = os.path.join(ROOT, "tests", "golden", "superglue", "pvp_golden.json")


def val_path(task, data=None):
    """superglue-<task>/val.jsonl in data (a folder laid out like the shared data) when given,
    otherwise in tests/data (COPA's in assets)."""
    folder = data or (ASSETS if task == "copa" else DATA)
    return os.path.join(folder, "superglue-" + task, "val.jsonl")


def read_source(wheel, rel):
    with zipfile.ZipFile(wheel) as z:
        return z.read(rel).decode("utf-8")


def load_flagai(wheel, builders=False):
    """(processor, pvp) modules from the wheel. builders: data_utils' input builders
    (build_input_from_ids, build_sample, ...) run as the wheel has them, for PVP.encode;
    otherwise they are None (get_parts and verbalize need none)."""
    for pkg in ["flagai", "flagai.data", "flagai.data.dataset", "flagai.data.dataset.superglue"]:
        m = types.ModuleType(pkg)
        m.__path__ = []
        sys.modules[pkg] = m
    du = types.ModuleType("flagai.data.dataset.data_utils")
    src = read_source(wheel, "flagai/data/dataset/data_utils.py")
    # InputExample and punctuation_standardization (and the builders) exactly as the wheel has them
    built = ["build_input_from_ids", "build_sample", "build_decoder_input", "build_decoder_sample",
             "num_special_tokens_to_add"]
    names = ["class InputExample", "def punctuation_standardization"] + (["def " + f for f in built] if builders else [])
    for name in names:
        start = src.index(name + "(" if name.startswith("def") else name)
        end = re.search(r"\n(?=\S)", src[start + 1:]).start() + start + 1
        exec(compile("import copy, json\nimport numpy as np\nfrom typing import *\n" + src[start:end], "data_utils",
                     "exec"), du.__dict__)
    for fn in built if not builders else []:
        setattr(du, fn, None)
    from typing import List
    du.List = List
    sys.modules["flagai.data.dataset.data_utils"] = du
    sys.modules["pandas"] = types.ModuleType("pandas")

    def run(name, rel):
        spec = importlib.util.spec_from_loader(name, loader=None)
        mod = importlib.util.module_from_spec(spec)
        mod.__package__ = name.rsplit(".", 1)[0]
        sys.modules[name] = mod
        exec(compile(read_source(wheel, rel), wheel + ":" + rel, "exec"), mod.__dict__)
        return mod

    proc = run("flagai.data.dataset.superglue.processor", "flagai/data/dataset/superglue/processor.py")
    pvp = run("flagai.data.dataset.superglue.pvp", "flagai/data/dataset/superglue/pvp.py")
    del sys.modules["pandas"]  # only processor.py's import needed it; sklearn probes for the real one
    return proc, pvp


class Args:
    task_mask = True
    continuous_prompt = False
    prefix_prompt = 0


class Tok:
    def get_command_id(self, name):
        return "[MASK]" if name == "mask" else name


# task: (processor class, PVP class, val lines (1-based) to pattern)
def cases(proc, pvp):
    return {
        "boolq": (proc.BoolQProcessor, pvp.BoolQPVP, None),
        "cb": (proc.CbProcessor, pvp.CbPVP, [1]),
        "copa": (proc.CopaProcessor, pvp.CopaPVP, [1, 5]),
        "multirc": (proc.MultiRcProcessor, pvp.MultiRcPVP, None),
        "rte": (proc.RteProcessor, pvp.RtePVP, [1]),
        "wic": (proc.WicProcessor, pvp.WicPVP, [1]),
        "wsc": (proc.WscProcessor, pvp.WscPVP, [1, 43]),
    }


def part_json(p, segment):
    if isinstance(p, list):
        return {"mask": True, "segment": segment}
    text, short = p if isinstance(p, tuple) else (p, False)
    return {"text": text, "shortenable": short, "segment": segment}


def main():
    argv = sys.argv[1:]
    data = None
    if "--data" in argv:
        k = argv.index("--data")
        if k + 1 >= len(argv):
            sys.exit("--data needs a folder (laid out like the project's shared data)")
        data = argv[k + 1]
        del argv[k:k + 2]
    wheel = argv[0] if argv else "/tmp/flagai-dl/flagai-1.8.0-py3-none-any.whl"
    proc, pvp = load_flagai(wheel)
    out = {"flagai": "1.8.0", "python": sys.version.split()[0], "cases": []}
    for task, (P, V, lines) in cases(proc, pvp).items():
        path = val_path(task, data)
        processor = P.__new__(P)
        exs = processor._create_examples(path, "dev")
        if task == "multirc":
            # the answer options of the shortest paragraph's first question (examples are in file order)
            best = min(exs, key=lambda e: len(e.text_a))
            picks = [(e, None) for e in exs if e.meta["passage_idx"] == best.meta["passage_idx"]][:2]
        elif task == "boolq":
            i = min(range(len(exs)), key=lambda k: len(exs[k].text_a))
            # its line in the full val.jsonl, whose idx numbers the lines from 0 (the fixture's
            # slice holds it on another line)
            picks = [(exs[i], exs[i].idx + 1)]
        else:
            picks = [(exs[ln - 1], ln) for ln in lines]
        labels = P.get_labels(processor)
        for ex, line in picks:
            for pid in V.available_patterns():
                v = V(Args(), Tok(), labels, 256, pattern_id=pid)
                a, b = v.get_parts(ex)
                parts = [part_json(p, 0) for p in a] + [part_json(p, 1) for p in b]
                case = {"task": task, "pattern": pid, "idx": ex.idx if task != "multirc" else ex.meta["answer_idx"],
                        "question_idx": ex.meta.get("question_idx", -1), "line": line, "parts": parts,
                        "joined": "".join("[MASK]" if "mask" in p else p["text"] for p in parts)}
                if task in ("copa", "wsc"):
                    case["candidates"] = v.get_answers(ex)
                else:
                    case["verbalizers"] = [v.verbalize(lab)[0] for lab in labels]
                out["cases"].append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print("wrote", OUT, len(out["cases"]), "cases")
    metrics()


def metrics():
    import sklearn
    from sklearn.metrics import accuracy_score, f1_score
    # CB-like: 3 classes, 60 rows (the C test builds the same arrays)
    n = 60
    lab = [(i * 7 + 3) % 3 for i in range(n)]
    pred = [l if (i * 13) % 5 != 0 else (l + 1 + i % 2) % 3 for i, l in enumerate(lab)]
    pred = [p if i % 11 != 4 else 2 for i, p in enumerate(pred)]
    print("sklearn", sklearn.__version__)
    print("cb acc %.17g macro_f1 %.17g" % (accuracy_score(lab, pred), f1_score(lab, pred, average="macro")))
    # class 2 in neither labels nor predictions: sklearn averages over classes 0 and 1 only
    lab2 = [(i * 5 + 1) % 2 for i in range(45)]
    pred2 = [l if i % 4 != 0 else 1 - l for i, l in enumerate(lab2)]
    pred2 = [p if i % 9 != 2 else 1 for i, p in enumerate(pred2)]
    print("two-class macro_f1 %.17g" % f1_score(lab2, pred2, average="macro"))
    # MultiRC-like: 64 answer options over 13 interleaved questions
    n = 64
    q = [(i * 5) % 13 for i in range(n)]
    lab3 = [(i * 3 + i // 7) % 2 for i in range(n)]
    pred3 = [l if (i % 6 != 1 and i % 10 != 3) else 1 - l for i, l in enumerate(lab3)]
    qs = sorted(set(q))
    em = sum(all(pred3[i] == lab3[i] for i in range(n) if q[i] == k) for k in qs) / len(qs)
    print("multirc f1a %.17g em %.17g acc %.17g" % (f1_score(lab3, pred3), em, accuracy_score(lab3, pred3)))


if __name__ == "__main__":
    main()
