#!/usr/bin/env python3
"""GLM seq2seq (blank infilling) CPU training speed: tunezoo's glm-finetune against FlagAI 1.8's
GLMModel (PyTorch), same config, same batch shapes, same threads.

    /usr/bin/python3 scripts/bench/bench_glm.py --configs 2x256 --steps 10

Every batch is B rows (--batch-size) of the same layout, no padding:

    [CLS] w1 .. wS [gMASK] | [sop] y1 .. y(L-1)        T = S + L + 2, sep = S + 2
    positions   0 .. S+1   | S+1 (the [gMASK]) x L
    block pos   0 ...   0  | 1 .. L
    labels     -100 ..     | y1 .. y(L-1) [eop]        (L targets per row)

- tunezoo: SRC/TGT files whose lines tokenize (with the shipped cog-pretrain.model, checked with
  tz-tokenize) to exactly S and L-1 tokens, one epoch of --steps batches, run as
  `glm-finetune --task seq2seq SRC TGT --arch CONFIG.json --max-steps N --log-interval 1
  --eval-interval -1 --save-interval -1` (1-line --val-src/--val-tgt, never evaluated); ms/step
  from its `step N/M | ... | X ms/step` lines (the trainer's own clock: forward, backward,
  clipping, AdamW).
- FlagAI: flagai.model.glm_model.GLMModel from the unpacked 1.8.0 wheel (--flagai, see
  scripts/golden/flagai_wheel.py) built from the same config.json, train mode, the same ids,
  [B, 2, T] position ids and attention_mask = sep per row; each step is zero_grad, forward,
  F.cross_entropy(ignore_index=-100) on the target positions, backward, clip_grad_norm_(1.0),
  AdamW (decay 0.01, none on biases and LayerNorms: glm-finetune's defaults), timed with
  time.perf_counter. Two variants (--flagai-logits):
    full     GLMModel(...)['logits'], i.e. FlagAI as shipped: logits for all B*T positions;
    targets  GLMModel's word embedding + transformer, then the tied output layer on the B*L
             target rows only, which is what glm-finetune computes.
- Both: the first --warmup steps are not timed; ms/step is the median of the rest; with
  --repeats R the sides run R rounds in alternation and each keeps its fastest round. Each side
  runs in its own child process with OMP/MKL/OPENBLAS_NUM_THREADS = --threads (torch also
  set_num_threads), and its peak RSS comes from os.wait4 (PyTorch's includes Python + torch;
  tunezoo's includes the SAVE_DIR/hf export glm-finetune always writes at the end). --bin is
  copied into the work folder first, so every round runs the same binary.

Needs torch and FlagAI's unpacked wheel; never needed to build or test tunezoo. Never asserts:
it prints what it measured.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import run_child, tail, thread_env  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# name: (num_layers, hidden_size, num_attention_heads); vocab 50048, max_sequence_length 256 in all
CONFIGS = {
    "6x512": (6, 512, 8),
    "2x256": (2, 256, 4),
}
VOCAB = 50048
MAX_SEQ = 256

SOURCE_WORD = "the"   # one piece ("▁the") per word in cog-pretrain.model
TARGET_WORD = "of"    # one piece ("▁of")
SPECIALS = ["[CLS]", "[gMASK]", "<|startofpiece|>", "<|endofpiece|>"]


def glm_config(name, dropout):
    """FlagAI's 19 GLMModel fields (scripts/golden/flagai_wheel.py GLM_CONFIG's keys)."""
    layers, hidden, heads = CONFIGS[name]
    return {
        "num_layers": layers, "vocab_size": VOCAB, "hidden_size": hidden, "num_attention_heads": heads,
        "embedding_dropout_prob": dropout, "attention_dropout_prob": dropout, "output_dropout_prob": dropout,
        "max_sequence_length": MAX_SEQ, "max_memory_length": 0, "checkpoint_activations": False,
        "checkpoint_num_layers": 1, "parallel_output": True, "relative_encoding": False,
        "block_position_encoding": True, "output_predict": True, "spell_length": None,
        "spell_func": "lstm", "attention_scale": 1.0, "tune_prefix_layers": None,
    }


def tokenize(tok_bin, tokenizer, lines):
    """tz-tokenize's ids for each line."""
    out = subprocess.run([tok_bin, "--tokenizer", tokenizer], input="\n".join(lines) + "\n", text=True,
                         capture_output=True)
    if out.returncode != 0:
        raise SystemExit(f"{tok_bin} exited {out.returncode}: {out.stderr.strip()}")
    return [[int(x) for x in l.split()] for l in out.stdout.splitlines()]


def make_data(args, workdir):
    """SRC/TGT/val files and the token ids both sides use; exits when a line does not tokenize to
    exactly S / L-1 tokens."""
    src_line = " ".join([SOURCE_WORD] * args.source_len)
    tgt_line = " ".join([TARGET_WORD] * (args.target_len - 1))
    ids = tokenize(args.tokenize_bin, args.tokenizer, [src_line, tgt_line] + SPECIALS)
    if len(ids) != 2 + len(SPECIALS):
        raise SystemExit(f"{args.tokenize_bin}: expected {2 + len(SPECIALS)} lines of ids, got {len(ids)}")
    src_ids, tgt_ids = ids[0], ids[1]
    if len(src_ids) != args.source_len or len(tgt_ids) != args.target_len - 1:
        raise SystemExit(f"the source line tokenizes to {len(src_ids)} tokens (expected {args.source_len}) and the "
                         f"target line to {len(tgt_ids)} (expected {args.target_len - 1}); pick other words")
    special = {}
    for name, row in zip(SPECIALS, ids[2:]):
        if len(row) != 1:
            raise SystemExit(f"{name} tokenizes to {row}, expected one id")
        special[name] = row[0]
    n_lines = args.batch_size * args.steps  # one epoch of --steps batches
    paths = {k: os.path.join(workdir, k + ".txt") for k in ("src", "tgt", "val_src", "val_tgt")}
    for key, line, n in (("src", src_line, n_lines), ("tgt", tgt_line, n_lines), ("val_src", src_line, 1),
                         ("val_tgt", tgt_line, 1)):
        with open(paths[key], "w", encoding="utf-8") as f:
            f.write((line + "\n") * n)
    batch = {"src_ids": src_ids, "tgt_ids": tgt_ids, "cls": special["[CLS]"], "gmask": special["[gMASK]"],
             "sop": special["<|startofpiece|>"], "eop": special["<|endofpiece|>"]}
    return paths, batch


STEP_RE = re.compile(r"^step (\d+)/(\d+) \|.*\| ([0-9.]+) ms/step \| ([0-9.]+) tokens/s", re.M)


def run_tunezoo(args, name, arch, paths, workdir, rnd):
    save = os.path.join(workdir, f"tz-{name}-{rnd + 1}")
    # the model file, not its folder: glm-finetune copies --tokenizer into SAVE_DIR/hf at the end
    tok = args.tokenizer
    if os.path.isdir(tok):
        tok = os.path.join(tok, "cog-pretrain.model")
    cmd = [args.bin, "--task", "seq2seq", paths["src"], paths["tgt"], "--val-src", paths["val_src"],
           "--val-tgt", paths["val_tgt"], "--arch", arch, "--tokenizer", tok,
           "--batch-size", str(args.batch_size), "--max-steps", str(args.steps), "--max-len", str(args.source_len + 2),
           "--max-target-len", str(args.target_len), "--log-interval", "1", "--eval-interval", "-1",
           "--save-interval", "-1", "--threads", str(args.threads), "--seed", str(args.seed), "--save-dir", save]
    log = os.path.join(workdir, f"tz-{name}-{rnd + 1}.log")
    print(f"[{name}] tunezoo: {' '.join(cmd)}", flush=True)
    rc, rss, wall = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        raise SystemExit(f"[{name}] {args.bin} exited {rc}; last lines of {log}:\n{tail(log)}")
    with open(log, errors="replace") as f:
        text = f.read()
    steps = [(int(m.group(1)), float(m.group(3)), float(m.group(4))) for m in STEP_RE.finditer(text)]
    if len(steps) <= args.warmup:
        raise SystemExit(f"[{name}] {log}: expected more than {args.warmup} step lines, found {len(steps)}")
    timed = [ms for _, ms, _ in steps[args.warmup:]]
    # tokens/s x s/step / B: the row length the program actually ran (no padding expected)
    T_seen = sorted({round(tps * ms / 1000.0 / args.batch_size) for _, ms, tps in steps})
    return {"ms": statistics.median(timed), "min": min(timed), "max": max(timed), "n": len(timed),
            "rss": rss, "wall": wall, "T_seen": T_seen}


def run_flagai(args, name, arch, batch, mode, workdir, rnd):
    out = os.path.join(workdir, f"flagai-{name}-{mode}-{rnd + 1}.json")
    bfile = os.path.join(workdir, "batch.json")
    with open(bfile, "w") as f:
        json.dump(batch, f)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--arch", arch, "--batch-file", bfile,
           "--mode", mode, "--worker-out", out, "--flagai", args.flagai, "--threads", str(args.threads),
           "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--seed", str(args.seed)]
    log = os.path.join(workdir, f"flagai-{name}-{mode}-{rnd + 1}.log")
    print(f"[{name}] FlagAI ({mode} logits): {args.steps} steps", flush=True)
    rc, rss, wall = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        raise SystemExit(f"[{name}] FlagAI worker exited {rc}; last lines of {log}:\n{tail(log)}")
    with open(out) as f:
        res = json.load(f)
    timed = res["ms_per_step"][args.warmup:]
    return {"ms": statistics.median(timed), "min": min(timed), "max": max(timed), "n": len(timed),
            "rss": rss, "wall": wall, "versions": res["versions"], "T": res["T"], "losses": res["losses"]}


def worker(args):
    """FlagAI GLMModel training steps on one fixed batch, in its own process."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(REPO, "scripts", "golden"))
    from flagai_wheel import load_flagai

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    glm_model, base_model, _ = load_flagai(os.path.abspath(args.flagai))
    with open(args.arch) as f:
        cfg = json.load(f)
    with open(args.batch_file) as f:
        bt = json.load(f)
    torch.manual_seed(args.seed)
    model = glm_model.GLMModel(base_model.change_json_to_cls(dict(cfg)))
    model.train()

    S, Lm1 = len(bt["src_ids"]), len(bt["tgt_ids"])
    sep = S + 2
    T = sep + Lm1 + 1
    row = [bt["cls"]] + bt["src_ids"] + [bt["gmask"]] + [bt["sop"]] + bt["tgt_ids"]
    lab = [-100] * sep + bt["tgt_ids"] + [bt["eop"]]
    B = args.batch_size
    ids = torch.tensor([row] * B, dtype=torch.long)
    labels = torch.tensor([lab] * B, dtype=torch.long)
    pos = torch.zeros(B, 2, T, dtype=torch.long)
    pos[:, 0, :sep] = torch.arange(sep)
    pos[:, 0, sep:] = sep - 1                      # the [gMASK]'s position
    pos[:, 1, sep:] = torch.arange(1, T - sep + 1)
    seps = torch.full((B,), sep, dtype=torch.long)
    rows = (labels.reshape(-1) != -100).nonzero().squeeze(1)  # the B*L target positions, flattened

    decay = [p for n, p in model.named_parameters() if not (n.endswith(".bias") or "layernorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith(".bias") or "layernorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    ms, losses = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if args.mode == "full":
            logits = model(input_ids=ids, position_ids=pos, attention_mask=seps)["logits"]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        else:
            hidden, _ = model.transformer(model.word_embeddings(ids), pos, seps)
            h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)  # backward: index_add_
            logits = F.linear(h, model.word_embeddings.weight)
            loss = F.cross_entropy(logits, labels.reshape(-1).index_select(0, rows), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms.append((time.perf_counter() - t0) * 1000.0)
        losses.append(loss.item())
        print(f"step {step + 1} loss {losses[-1]:.4f} {ms[-1]:.1f} ms", flush=True)
    res = {"ms_per_step": ms, "losses": losses, "T": T,
           "versions": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                        "blas": "mkl" if torch.backends.mkl.is_available() else "other"}}
    with open(args.worker_out, "w") as f:
        json.dump(res, f)


def flagai_version(root):
    for d in os.listdir(root) if os.path.isdir(root) else []:
        if d.startswith("flagai-") and d.endswith(".dist-info"):
            return d[len("flagai-"):-len(".dist-info")]
    return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load():
    return "%.2f" % os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--bin", default=os.path.join(REPO, "build/bin/glm-finetune"), help="glm-finetune to time")
    ap.add_argument("--tokenize-bin", default=os.path.join(REPO, "build/bin/tz-tokenize"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "assets/glm-chinese-spm"))
    ap.add_argument("--flagai", default="/tmp/flagai-dl/x", help="folder holding FlagAI 1.8's unpacked wheel")
    ap.add_argument("--configs", default="6x512", help="comma list of: " + ",".join(CONFIGS))
    ap.add_argument("--batch-size", type=int, default=16, help="rows per batch (B)")
    ap.add_argument("--source-len", type=int, default=96, help="source tokens per row (S)")
    ap.add_argument("--target-len", type=int, default=32, help="target tokens per row, [eop] included (L)")
    ap.add_argument("--steps", type=int, default=10, help="training steps per side")
    ap.add_argument("--warmup", type=int, default=2, help="first steps not timed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="rounds per side, alternating; each side's fastest is shown")
    ap.add_argument("--dropout", type=float, default=0.1, help="all three GLM dropouts, both sides")
    ap.add_argument("--flagai-logits", default="full,targets", help="FlagAI variants: full, targets (see the docstring)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workdir", default="", help="keep configs, data and logs here (default: a temporary folder)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arch", default="", help=argparse.SUPPRESS)
    ap.add_argument("--batch-file", default="", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0

    if args.repeats < 1:
        raise SystemExit("--repeats: expected at least 1")
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps: expected more than --warmup {args.warmup}")
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for n in names:
        if n not in CONFIGS:
            raise SystemExit(f"--configs: unknown config {n!r}; expected some of {','.join(CONFIGS)}")
    modes = [m.strip() for m in args.flagai_logits.split(",") if m.strip()]
    for m in modes:
        if m not in ("full", "targets"):
            raise SystemExit(f"--flagai-logits: unknown variant {m!r}; expected full and/or targets")
    T = args.source_len + args.target_len + 2
    if T > MAX_SEQ + 1:
        raise SystemExit(f"rows of {T} tokens exceed max_sequence_length {MAX_SEQ}")
    for p in (args.bin, args.tokenize_bin):
        if not os.path.exists(p):
            raise SystemExit(f"{p}: not found (build it, or pass --bin / --tokenize-bin)")

    tmp = None
    workdir = args.workdir
    if not workdir:
        tmp = tempfile.TemporaryDirectory(prefix="tz-bench-glm-")
        workdir = tmp.name
    os.makedirs(workdir, exist_ok=True)
    paths, batch = make_data(args, workdir)
    # every round runs one copy of the binary, even if its build folder is rebuilt meanwhile
    bin_src, bin_mtime = args.bin, os.stat(args.bin).st_mtime
    args.bin = os.path.join(workdir, os.path.basename(bin_src))
    shutil.copy2(bin_src, args.bin)

    results = []
    loads = [load()]
    for name in names:
        arch = os.path.join(workdir, f"{name}.config.json")
        with open(arch, "w") as f:
            json.dump(glm_config(name, args.dropout), f, indent=2)
        # --repeats rounds of (tunezoo, FlagAI variants), alternating so that load drift hits all
        # sides alike; each side keeps its fastest round (the least disturbed one)
        tz, fl = None, {}
        for rnd in range(args.repeats):
            r = run_tunezoo(args, name, arch, paths, workdir, rnd)
            print(f"[{name}] round {rnd + 1}: tunezoo {r['ms']:.1f} ms/step", flush=True)
            tz = r if tz is None or r["ms"] < tz["ms"] else tz
            loads.append(load())
            for mode in modes:
                r = run_flagai(args, name, arch, batch, mode, workdir, rnd)
                print(f"[{name}] round {rnd + 1}: FlagAI ({mode} logits) {r['ms']:.1f} ms/step", flush=True)
                fl[mode] = r if mode not in fl or r["ms"] < fl[mode]["ms"] else fl[mode]
                loads.append(load())
        results.append((name, tz, fl))

    import torch
    v = next(iter(results[0][2].values()))["versions"] if modes else {"torch": torch.__version__}
    print()
    print(f"python {platform.python_version()}, torch {v['torch']} (BLAS {v.get('blas', '?')}), FlagAI "
          f"{flagai_version(args.flagai)} (wheel at {args.flagai}); {cpu_model()}, {os.cpu_count()} CPUs")
    print(f"{bin_src} (built {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(bin_mtime))}, copied before the "
          f"first run); "
          f"{args.threads} threads each side; dropout {args.dropout} both sides; batch B={args.batch_size} x T={T} "
          f"(S={args.source_len}, L={args.target_len}: {args.batch_size * args.target_len} target tokens); "
          f"{args.steps} steps, first {args.warmup} not timed, median of the rest; best of {args.repeats} "
          f"round(s); "
          f"load average (1 min) {' -> '.join(loads)}")
    print()
    print("| config | side | ms/step (median) | fastest..slowest step | steps/s | tunezoo speed / this "
          "(median) | (fastest steps) | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, tz, fl in results:
        L, H, NH = CONFIGS[name]
        label = f"{name} ({L} layers, {H} wide, {NH} heads)"
        t_note = "" if tz["T_seen"] == [T] else f" (T seen {tz['T_seen']}!)"
        print(f"| {label} | tunezoo{t_note} | {tz['ms']:.1f} | {tz['min']:.0f}..{tz['max']:.0f} | "
              f"{1000 / tz['ms']:.2f} | 1.00 | 1.00 | {tz['rss']:.0f} |")
        for mode, r in fl.items():
            what = "FlagAI GLMModel, logits at all B*T positions" if mode == "full" else \
                "FlagAI GLMModel, logits at the B*L target positions"
            print(f"| {label} | {what} | {r['ms']:.1f} | {r['min']:.0f}..{r['max']:.0f} | {1000 / r['ms']:.2f} | "
                  f"{r['ms'] / tz['ms']:.2f} | {r['min'] / tz['min']:.2f} | {r['rss']:.0f} |")
    print()
    print("tunezoo speed / this = this side's ms/step / tunezoo's (> 1: tunezoo is faster); (fastest steps) "
          "compares the fastest timed step of each side, the least disturbed on a busy machine. "
          "RSS includes each process's start-up (Python + torch for FlagAI).")
    if args.workdir:
        print(f"logs, data and configs kept in {workdir}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
