#!/usr/bin/env python3
"""T5 training step and generation speed: t5-finetune against HF T5ForConditionalGeneration
(PyTorch, CPU) on the same random weights, data, batch size and threads.

    /usr/bin/python3 scripts/bench/bench_t5.py --bin build/bin/t5-finetune --configs t5-small,4x256

For each config it writes one random HF T5 folder (safetensors + the shipped spiece.model) that
both sides load, then
- training: one epoch over the first --rows Multi30k pairs (en -> de, "translate English to
  German: " prefix) of --data's train.en/train.de, or of its val.en/val.de when it has no train
  files (the default, the repository's assets/multi30k-en-de, ships val only: 1014 pairs),
  batch --batch-size, dropout 0.1, AdamW; the mean ms per optimizer step
  over the steps after the first two (tunezoo: its metrics.jsonl; HF: a plain loop of
  forward, backward, clip, AdamW step, timed the same way).
- generation: --gen-rows source lines, --num-beams beams, --max-new-tokens; generated tokens per
  second, eos included, generation and decoding timed on both sides (loading is not).
--precision bf16 runs t5-finetune with --precision bf16 and HF's forward passes (training and
generation) under torch.autocast("cpu", dtype=torch.bfloat16); weights and AdamW stay fp32 on both.
--lora R (issue 36) trains LoRA adapters of rank R (alpha 2R, no dropout, on --lora-targets, default
every linear: q,k,v,o,wi,wo) on both sides (t5-finetune's --lora-r; HF PEFT's get_peft_model,
SEQ_2_SEQ_LM, AdamW over the adapters), and runs tunezoo's full fine-tuning too, for the speedup
and the gradient + AdamW memory of LoRA against it (from t5-finetune's memory line).
Needs torch + transformers (+ peft with --lora); never needed to build or test tunezoo."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import memory_line  # noqa: E402

CONFIGS = {
    # name: (d_model, d_ff, layers, heads, d_kv)
    "t5-small": (512, 2048, 6, 8, 64),    # 6 layers, 512 wide: t5-small's shape
    "4x256": (256, 1024, 4, 4, 64),
    "tiny": (64, 128, 2, 4, 16),          # not a benchmark: a seconds-long smoke test
}


def make_model(name, workdir, spiece):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    d, ff, L, H, dkv = CONFIGS[name]
    cfg = T5Config(vocab_size=32128, d_model=d, d_ff=ff, num_layers=L, num_decoder_layers=L, num_heads=H, d_kv=dkv,
                   dropout_rate=0.1, feed_forward_proj="relu", tie_word_embeddings=True, decoder_start_token_id=0,
                   pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(cfg)
    out = os.path.join(workdir, name)
    model.save_pretrained(out, safe_serialization=True)
    subprocess.check_call(["cp", spiece, os.path.join(out, "spiece.model")])
    return out


def hf_train(model_dir, src, tgt, args):
    import torch
    from transformers import T5ForConditionalGeneration, T5TokenizerFast
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = T5TokenizerFast(vocab_file=os.path.join(model_dir, "spiece.model"))
    model = T5ForConditionalGeneration.from_pretrained(model_dir)
    if args.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.0,
                                                 target_modules=args.lora_targets.split(","),
                                                 task_type="SEQ_2_SEQ_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.0)
    prefix = "translate English to German: "
    order = torch.randperm(len(src), generator=torch.Generator().manual_seed(args.seed)).tolist()
    times = []
    for start in range(0, len(order), args.batch_size):
        rows = order[start:start + args.batch_size]
        enc = tok([prefix + src[i] for i in rows], max_length=128, truncation=True, padding=True, return_tensors="pt")
        lab = tok(text_target=[tgt[i] for i in rows], max_length=128, truncation=True, padding=True,
                  return_tensors="pt").input_ids
        lab[lab == tok.pad_token_id] = -100
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, labels=lab).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return 1000 * sum(times[2:]) / max(1, len(times) - 2), len(times)


def hf_generate(model_dir, src, args):
    import torch
    from transformers import T5ForConditionalGeneration, T5TokenizerFast
    torch.set_num_threads(args.threads)
    tok = T5TokenizerFast(vocab_file=os.path.join(model_dir, "spiece.model"))
    model = T5ForConditionalGeneration.from_pretrained(model_dir).eval()
    prefix = "translate English to German: "
    tokens = 0
    t0 = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        for start in range(0, len(src), args.batch_size):
            enc = tok([prefix + s for s in src[start:start + args.batch_size]], max_length=128, truncation=True,
                      padding=True, return_tensors="pt")
            out = model.generate(**enc, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
                                 do_sample=False, early_stopping=False, length_penalty=1.0)
            tok.batch_decode(out, skip_special_tokens=True)
            tokens += int((out[:, 1:] != tok.pad_token_id).sum())
    return tokens / (time.perf_counter() - t0), tokens


def tz_train(bin_path, model_dir, src_path, tgt_path, args, workdir, lora):
    """(ms/step after the first two, steps, (gradients MiB, AdamW state MiB) of the memory line)."""
    save = os.path.join(workdir, "tz_train_" + os.path.basename(model_dir) + ("_lora" if lora else ""))
    shutil.rmtree(save, ignore_errors=True)  # t5-finetune appends to a metrics.jsonl it finds (a reused --workdir)
    cmd = [bin_path, src_path, tgt_path, "--val-src", src_path, "--val-tgt", tgt_path, "--model", model_dir,
           "--epochs", "1", "--batch-size", str(args.batch_size), "--lr", "5e-4", "--weight-decay", "0",
           "--dropout", "0.1", "--max-source-len", "128", "--max-target-len", "128", "--seed", str(args.seed),
           "--threads", str(args.threads), "--eval-interval", "-1", "--save-interval", "-1", "--log-interval", "1",
           "--source-prefix", "translate English to German: ", "--save-dir", save, "--precision", args.precision]
    if lora:
        cmd += ["--lora-r", str(args.lora), "--lora-alpha", str(2 * args.lora), "--lora-targets", args.lora_targets]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    log = os.path.join(workdir, os.path.basename(save) + ".log")
    with open(log, "w") as out:
        subprocess.run(cmd, check=True, env=env, stdout=out)
    steps = [json.loads(l) for l in open(os.path.join(save, "metrics.jsonl")) if '"train"' in l]
    ms = [s["ms_per_step"] for s in steps]
    return sum(ms[2:]) / max(1, len(ms) - 2), len(ms), memory_line(log)


def tz_generate(bin_path, model_dir, src_path, args, workdir):
    """Generated tokens per second as t5-finetune --predict logs them: generation and decoding
    timed, loading and tokenizing not (as on the HF side)."""
    import re
    cmd = [bin_path, "--predict", src_path, "--model", model_dir, "--num-beams", str(args.num_beams),
           "--max-new-tokens", str(args.max_new_tokens), "--eval-batch-size", str(args.batch_size),
           "--batch-size", str(args.batch_size), "--threads", str(args.threads), "--max-source-len", "128",
           "--source-prefix", "translate English to German: ", "--save-dir", os.path.join(workdir, "tz_pred_" + os.path.basename(model_dir)),
           "--predict-out", os.path.join(workdir, "tz_pred.txt"), "--precision", args.precision]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    m = re.search(r"generated (\d+) tokens for \d+ inputs in ([0-9.]+) s", out)
    tokens, secs = int(m.group(1)), float(m.group(2))
    return tokens / secs, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/bin/t5-finetune")
    ap.add_argument("--configs", default="t5-small")
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--gen-rows", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-beams", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                    "../../assets/multi30k-en-de")),
                    help="Multi30k folder: train.en/train.de, else val.en/val.de (default assets/multi30k-en-de)")
    ap.add_argument("--skip-gen", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="both sides: t5-finetune's --precision, HF under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--workdir", default="", help="models, data and tunezoo's runs go here (default: a temp dir)")
    ap.add_argument("--json-out", default="", help="also write the results to this file as JSON")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on both sides (see the module doc); 0: off")
    ap.add_argument("--lora-targets", default="q,k,v,o,wi,wo", help="with --lora: the modules adapted")
    args = ap.parse_args()
    root = os.path.dirname(os.path.abspath(__file__))
    spiece = os.path.join(root, "../../assets/t5-spiece/spiece.model")
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_t5_")
    os.makedirs(workdir, exist_ok=True)
    split = "train" if os.path.exists(os.path.join(args.data, "train.en")) else "val"
    src = open(os.path.join(args.data, split + ".en"), encoding="utf-8").read().rstrip("\n").split("\n")
    tgt = open(os.path.join(args.data, split + ".de"), encoding="utf-8").read().rstrip("\n").split("\n")
    src, tgt = src[:args.rows], tgt[:args.rows]
    src_path, tgt_path = os.path.join(workdir, "s.en"), os.path.join(workdir, "s.de")
    open(src_path, "w", encoding="utf-8").write("\n".join(src) + "\n")
    open(tgt_path, "w", encoding="utf-8").write("\n".join(tgt) + "\n")
    gen_path = os.path.join(workdir, "g.en")
    open(gen_path, "w", encoding="utf-8").write("\n".join(src[:args.gen_rows]) + "\n")
    import torch
    import transformers
    lora = ""
    if args.lora:
        import peft
        lora = f"; LoRA r {args.lora} (alpha {2 * args.lora}) on {args.lora_targets} on both sides, PEFT {peft.__version__}"
    print(f"PyTorch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
          f"batch {args.batch_size}, {len(src)} training pairs ({split}), generation {args.gen_rows} rows x "
          f"{args.num_beams} "
          f"beams x {args.max_new_tokens} new tokens, {args.precision}{lora}")
    results = {}
    for name in args.configs.split(","):
        model_dir = make_model(name, workdir, spiece)
        tz_ms, tz_steps, tz_mem = tz_train(args.bin, model_dir, src_path, tgt_path, args, workdir, args.lora > 0)
        hf_ms, hf_steps = hf_train(model_dir, src, tgt, args)
        print(f"{name:9} train  tunezoo {tz_ms:8.1f} ms/step ({tz_steps} steps)  HF {hf_ms:8.1f} ms/step "
              f"({hf_steps} steps)  speedup x{hf_ms / tz_ms:.2f}", flush=True)
        results[name] = {"tunezoo_ms_per_step": tz_ms, "tunezoo_steps": tz_steps,
                         "hf_ms_per_step": hf_ms, "hf_steps": hf_steps, "tunezoo_grad_adamw_mib": tz_mem}
        if args.lora:  # tunezoo's own full fine-tuning, for LoRA's speedup and memory against it
            full_ms, _, full_mem = tz_train(args.bin, model_dir, src_path, tgt_path, args, workdir, False)
            mem = (f"; gradients + AdamW state {sum(tz_mem):.1f} MiB with LoRA, {sum(full_mem):.1f} MiB full "
                   f"({100 * sum(tz_mem) / sum(full_mem):.2f}%)") if tz_mem and full_mem else ""
            print(f"{name:9} tunezoo full fine-tuning {full_ms:.1f} ms/step, with LoRA {tz_ms:.1f} "
                  f"({full_ms / tz_ms:.2f}x){mem}", flush=True)
            results[name].update(tunezoo_full_ms_per_step=full_ms, tunezoo_full_grad_adamw_mib=full_mem)
        if args.skip_gen:
            continue
        tz_tps, tz_tok = tz_generate(args.bin, model_dir, gen_path, args, workdir)
        hf_tps, hf_tok = hf_generate(model_dir, src[:args.gen_rows], args)
        print(f"{name:9} generate tunezoo {tz_tps:8.1f} tok/s ({tz_tok} tokens)  HF {hf_tps:8.1f} "
              f"tok/s ({hf_tok} tokens)  speedup x{tz_tps / hf_tps:.2f}", flush=True)
        results[name].update(tunezoo_tok_per_s=tz_tps, tunezoo_tokens=tz_tok, hf_tok_per_s=hf_tps, hf_tokens=hf_tok)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                       "lora": args.lora, "lora_targets": args.lora_targets if args.lora else None,
                       "threads": args.threads, "precision": args.precision, "batch_size": args.batch_size,
                       "rows": len(src), "split": split, "configs": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
