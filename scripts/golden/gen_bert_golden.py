#!/usr/bin/env python3
"""Generate the BERT and RoBERTa golden files that tests/test_golden_bert.c compares against.

The C side of tunezoo is checked against Hugging Face Transformers on tiny, seeded
BertForSequenceClassification and RobertaForSequenceClassification models (2 layers, width
64, 4 heads, intermediate 128, vocab 100, 64 positions, dropout 0), each with a
classification head (num_labels 2, cross-entropy) and a regression head (num_labels 1, MSE
on float labels, as STS-B), and a BERT multi-label head (bert-tiny-ml: num_labels 3,
problem_type multi_label_classification, BCEWithLogitsLoss on multi-hot float labels, one row
with no class). For each of the five this script saves the HF model (the
converter's test input), runs one fixed padded batch (with token_type_ids for BERT) and
dumps the logits, the loss, every parameter gradient, the weights after one AdamW step
(after_step.safetensors, kept apart so that each file stays under 1 MiB) and the losses and
gradient norms of five clipped training steps. The conventions (file layout, metadata,
deterministic safetensors writer) are gen_gpt2_golden.py's, whose writer this imports.

    /usr/bin/python3 scripts/golden/gen_bert_golden.py [--kinds cls,reg,ml]

--kinds writes only those heads' folders, so that a new kind is added without rewriting the
others under other library versions (bert-tiny-ml came later, from torch 2.15 and transformers
5.24; the rest from the versions in their metadata).

Everything is float32 on CPU with one thread and deterministic algorithms, so a rerun with
the same versions writes the same numbers.
"""

import argparse
import copy
import json
import os
import sys

import torch
from transformers import (BertConfig, BertForSequenceClassification, RobertaConfig,
                          RobertaForSequenceClassification)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_golden import save_file, summarize, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SEED = 1234
PERTURB_SEED = 4321
BATCH_SEED = 99
PERTURB_STD = 0.02

B, T = 3, 16
REAL_LENGTHS = [16, 11, 7]
# Where text B starts in each row (token_type_ids 1 from there to the last real token).
SEGMENT_B = [9, 6, 4]
CLS_LABELS = [1, 0, 1]
REG_LABELS = [0.5, -1.25, 2.0]
ML_LABELS = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
ML_NUM_LABELS = 3
VOCAB = 100

LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
CLIP = 1.0
TRAIN_STEPS = 5


def common(num_labels):
    extra = {"problem_type": "multi_label_classification"} if num_labels == ML_NUM_LABELS else {}
    return dict(**extra, vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, hidden_act="gelu", hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                initializer_range=0.02, num_labels=num_labels, attn_implementation="eager")


def make_config(family, num_labels):
    if family == "bert":
        return BertConfig(type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0,
                          **common(num_labels))
    # RoBERTa: pad 1, positions from padding_idx + 1, one token type, eps 1e-5 as roberta-base
    return RobertaConfig(type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, **common(num_labels))


def is_no_decay(name):
    # Biases and every LayerNorm parameter skip weight decay (HF Trainer's rule).
    return name.endswith(".bias") or "LayerNorm" in name


def build_model(family, num_labels):
    torch.manual_seed(SEED)
    cls = BertForSequenceClassification if family == "bert" else RobertaForSequenceClassification
    model = cls(make_config(family, num_labels))
    # Biases start at 0 and LayerNorm at 1/0: shift them so that a C model that ignored one
    # would not match by accident.
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_no_decay(name):
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * PERTURB_STD)
    return model


def make_batch(family, num_labels):
    pad = 0 if family == "bert" else 1
    gen = torch.Generator().manual_seed(BATCH_SEED)
    # Real tokens never equal the pad id (2..VOCAB-1 covers both families' specials loosely).
    input_ids = torch.randint(2, VOCAB, (B, T), generator=gen, dtype=torch.long)
    attention_mask = torch.zeros(B, T, dtype=torch.long)
    token_type_ids = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(REAL_LENGTHS):
        input_ids[b, n:] = pad
        attention_mask[b, :n] = 1
        if family == "bert":
            token_type_ids[b, SEGMENT_B[b]:n] = 1
    if num_labels == 1:
        labels = torch.tensor(REG_LABELS, dtype=torch.float32)
    elif num_labels == ML_NUM_LABELS:
        labels = torch.tensor(ML_LABELS, dtype=torch.float32)
    else:
        labels = torch.tensor(CLS_LABELS, dtype=torch.long)
    return input_ids, attention_mask, token_type_ids, labels


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_no_decay(name) else decay).append(p)
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                             foreach=False)


def gen_one(family, num_labels, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    model = build_model(family, num_labels)
    model.save_pretrained(out_dir, safe_serialization=True)
    init_state = copy.deepcopy(model.state_dict())
    input_ids, attention_mask, token_type_ids, labels = make_batch(family, num_labels)
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=True)
    if family == "bert":
        kw["token_type_ids"] = token_type_ids

    model.train()
    model.zero_grad(set_to_none=True)
    out = model(output_hidden_states=True, **kw)
    out.loss.backward()

    tensors = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "token_type_ids": token_type_ids.to(torch.int32),
        "logits": out.logits.detach().clone(),
        "loss": out.loss.detach().reshape(1).clone(),
        # Last encoder hidden state (B, T, hidden), for localising a mismatch.
        "hidden": out.hidden_states[-1].detach().clone(),
    }
    if labels.dtype == torch.float32:
        tensors["labels"] = labels.clone()
    else:
        tensors["labels"] = labels.to(torch.int32)
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().clone()

    opt = make_optimizer(model)
    opt.step()
    after = {"after_step." + name: p.detach().clone() for name, p in model.named_parameters()}

    model.load_state_dict(init_state)
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model)
    losses, norms = [], []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        o = model(**kw)
        o.loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(o.loss.item())
        norms.append(float(gn))
    tensors["losses5"] = torch.tensor(losses, dtype=torch.float32)
    tensors["gradnorm5"] = torch.tensor(norms, dtype=torch.float32)

    tensors = {k: v.contiguous() for k, v in tensors.items()}
    after = {k: v.contiguous() for k, v in after.items()}
    meta = versions()
    meta.update({
        "model": type(model).__name__,
        "config": os.path.basename(out_dir) + "/config.json",
        "num_labels": str(num_labels),
        "seed": str(SEED),
        "perturb_seed": str(PERTURB_SEED),
        "perturb_std": str(PERTURB_STD),
        "batch_seed": str(BATCH_SEED),
        "real_lengths": json.dumps(REAL_LENGTHS),
        "segment_b": json.dumps(SEGMENT_B) if family == "bert" else "none (token_type_ids not passed)",
        "pad_token_id": str(model.config.pad_token_id),
        "positions": ("0..T-1 for every row" if family == "bert" else
                      "create_position_ids_from_input_ids: cumsum(ids != pad) + pad on real tokens, pad on pads"),
        "pooling": "hidden state of the first token ([CLS] / <s>)",
        "loss": ("MSELoss(logits.squeeze(), labels) (mean over the batch)" if num_labels == 1 else
                 "BCEWithLogitsLoss(logits, labels) (mean over the batch and the classes)"
                 if num_labels == ML_NUM_LABELS else "mean cross-entropy over the batch"),
        "optimizer": "torch.optim.AdamW foreach=False",
        "lr": str(LR),
        "beta1": str(BETAS[0]),
        "beta2": str(BETAS[1]),
        "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY),
        "no_decay": "every *.bias and every LayerNorm parameter",
        "clip_grad_norm": str(CLIP),
        "train_steps": str(TRAIN_STEPS),
        "layout": "HF state_dict names and shapes ([out, in] linears)",
    })
    path = os.path.join(out_dir, "golden.safetensors")
    save_file(tensors, path, metadata=meta)
    save_file(after, os.path.join(out_dir, "after_step.safetensors"), metadata=meta)

    # The saved folder reloads to the weights the golden run started from.
    cls = type(model)
    reloaded = cls.from_pretrained(out_dir)
    ref = build_model(family, num_labels).state_dict()
    for k, v in reloaded.state_dict().items():
        if k in ref and not torch.equal(v, ref[k]):
            sys.exit(f"error: reloaded {k} differs from the generated model in {out_dir}")
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default tests/golden)")
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    ap.add_argument("--kinds", default="cls,reg,ml", help="the heads to write: cls, reg, ml (default all)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    dirs = []
    kinds = args.kinds.split(",")
    for family in ("bert", "roberta"):
        for kind, nl in (("cls", 2), ("reg", 1), ("ml", ML_NUM_LABELS)):
            if kind not in kinds or (kind == "ml" and family != "bert"):  # the head is shared
                continue
            dirs.append(gen_one(family, nl, os.path.join(args.out, f"{family}-tiny-{kind}")))
    for d in dirs:
        for fn in sorted(os.listdir(d)):
            p = os.path.join(d, fn)
            os.chmod(p, 0o644)
            size = os.path.getsize(p)
            if size >= 1 << 20:
                sys.exit(f"error: {p} is {size} bytes, over 1 MiB")
            if not args.quiet and fn == "golden.safetensors":
                summarize(p)


if __name__ == "__main__":
    main()
