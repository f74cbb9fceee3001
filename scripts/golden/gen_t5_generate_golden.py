#!/usr/bin/env python3
"""Record HF generate() on the tiny T5 models for tests/test_t5_generate.c.

Reads the two folders gen_t5_golden.py wrote (tests/golden/t5-tiny-v1_0 and t5-tiny-v1_1:
config.json, model.safetensors and the batch of 3 padded sources in golden.safetensors) and
writes generate.safetensors next to them: for a list of decoding cases, what
T5ForConditionalGeneration.generate() returns on that batch.

    /usr/bin/python3 scripts/golden/gen_t5_generate_golden.py

Cases (max_new_tokens 12 unless said):
  greedy (num_beams 1): `sequences` and, per step, `scores` (output_scores: the processed
      logits, which equal the raw logits here since T5's generation config adds no processor)
  beam search, num_beams 3: length_penalty 1.0 and 0.6 x early_stopping True, False and
      "never": `sequences` and `sequences_scores`

Tiny random models rarely emit the real eos (1), so some cases pass eos_token_id = a token
the model does produce (generate() accepts it): the v1.1 greedy case with eos 28 stops its
rows at different steps (8, 6 and never), the v1.0 beam cases with eos 1 and 31 make
early_stopping True and False differ, and the v1.1 beam cases with eos 84 make the length
penalty matter. The script checks that these differences are still there, so a change of
versions that loses them fails here rather than silently weakening the test.

Everything runs on CPU in float32 with one thread and eager attention.
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import T5ForConditionalGeneration
from transformers.utils import logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_golden import save_file, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAX_NEW = 12
EARLY = {False: 0, True: 1, "never": 2}
BEAM_CONFIGS = [(lp, es) for lp in (1.0, 0.6) for es in (True, False, "never")]

# (num_beams, eos, max_new_tokens, length_penalty, early_stopping) per model
CASES = {
    "v1_0": [(1, 1, MAX_NEW, 1.0, False)]
            + [(3, eos, MAX_NEW, lp, es) for eos in (1, 31) for lp, es in BEAM_CONFIGS],
    "v1_1": [(1, 1, MAX_NEW, 1.0, False), (1, 28, MAX_NEW, 1.0, False), (1, 28, 5, 1.0, False)]
            + [(3, eos, MAX_NEW, lp, es) for eos in (1, 84) for lp, es in BEAM_CONFIGS],
}


def run_case(model, ids, mask, case):
    nb, eos, max_new, lp, es = case
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, num_beams=nb,
              eos_token_id=eos, return_dict_in_generate=True, output_scores=True)
    if nb > 1:
        kw.update(length_penalty=lp, early_stopping=es)
    with torch.no_grad():
        return model.generate(**kw)


def gen_one(variant, golden_dir):
    model = T5ForConditionalGeneration.from_pretrained(golden_dir, attn_implementation="eager").eval()
    g = load_file(os.path.join(golden_dir, "golden.safetensors"))
    ids, mask = g["input_ids"].long(), g["attention_mask"].long()
    tensors = {"input_ids": ids.to(torch.int32), "attention_mask": mask.to(torch.int32)}
    desc = []
    seqs = {}
    for i, case in enumerate(CASES[variant]):
        nb, eos, max_new, lp, es = case
        out = run_case(model, ids, mask, case)
        seqs[case] = out.sequences.tolist()
        tensors[f"case{i}.config"] = torch.tensor([nb, EARLY[es], eos, max_new, round(lp * 1000)], dtype=torch.int32)
        tensors[f"case{i}.sequences"] = out.sequences.to(torch.int32)
        if nb == 1:
            logits = torch.stack(out.scores)  # (steps, B, vocab)
            tensors[f"case{i}.scores"] = logits.float()
        else:
            tensors[f"case{i}.sequences_scores"] = out.sequences_scores.float()
        desc.append(dict(num_beams=nb, eos_token_id=eos, max_new_tokens=max_new, length_penalty=lp,
                         early_stopping=es, sequences=seqs[case]))

    # the differences the cases exist for
    def differ(a, b):
        return seqs[a] != seqs[b]
    if variant == "v1_0":
        if not differ((3, 1, MAX_NEW, 1.0, True), (3, 1, MAX_NEW, 1.0, False)):
            sys.exit("error: v1_0 eos 1: early_stopping True and False no longer differ")
    else:
        lens = [next((t for t, y in enumerate(r[1:]) if y == 28), None) for r in seqs[(1, 28, MAX_NEW, 1.0, False)]]
        if lens.count(None) != 1 or len(set(lens)) != 3:
            sys.exit(f"error: v1_1 greedy eos 28: rows should stop at different steps, one never: {lens}")
        if not differ((3, 84, MAX_NEW, 1.0, True), (3, 84, MAX_NEW, 0.6, True)):
            sys.exit("error: v1_1 eos 84: length_penalty 1.0 and 0.6 no longer differ")

    meta = versions()
    meta.update({
        "model": "T5ForConditionalGeneration.generate",
        "variant": variant,
        "cases": json.dumps(desc),
        "case.config": "int32 [num_beams, early_stopping (0 False, 1 True, 2 'never'), eos_token_id, max_new_tokens, "
                       "length_penalty * 1000] (an int, so that 0.6 reads back as the double HF used)",
        "case.sequences": "HF's output: decoder_start_token_id first; greedy pads finished rows with pad 0, beam "
                          "search pads shorter hypotheses with eos (pad_token_id or eos: 0 is falsy)",
        "case.scores": "greedy only: output_scores, (steps, B, vocab), every row each step (finished ones too)",
        "case.sequences_scores": "beam only: the best hypothesis' sum of log-probs / generated_len ** length_penalty",
        "attention": "eager",
        "threads": "1",
    })
    path = os.path.join(golden_dir, "generate.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=meta)
    os.chmod(path, 0o644)
    return path, desc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "golden"),
                    help="folder holding t5-tiny-v1_0 and t5-tiny-v1_1 (default tests/golden)")
    ap.add_argument("--quiet", action="store_true", help="do not print the cases")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    logging.set_verbosity_error()  # v1.1's untied head warning is expected (gen_t5_golden.py)
    for v in ("v1_0", "v1_1"):
        path, desc = gen_one(v, os.path.join(args.golden, f"t5-tiny-{v}"))
        print(f"{path}: {len(desc)} cases, {os.path.getsize(path)} bytes")
        if not args.quiet:
            for i, d in enumerate(desc):
                print(f"  case{i}: beams {d['num_beams']} eos {d['eos_token_id']} max_new {d['max_new_tokens']} "
                      f"lp {d['length_penalty']} early {d['early_stopping']}: {d['sequences']}")


if __name__ == "__main__":
    main()
