#!/usr/bin/env python3
"""Generate the T5 golden files that tests/test_golden_t5.c compares against.

Two tiny, seeded T5ForConditionalGeneration models (2 encoder and 2 decoder blocks,
d_model 32, d_kv 8, 4 heads, d_ff 64, vocab 100, 8 relative-position buckets, max distance
16, dropout 0) in the two layouts the C model supports:

  t5-tiny-v1_0   feed_forward_proj "relu" (DenseReluDense wi, wo), LM head tied to `shared`
                 and the decoder output scaled by d_model^-0.5 (original T5)
  t5-tiny-v1_1   feed_forward_proj "gated-gelu" (wi_0, wi_1, wo; gelu_new * linear), its own
                 lm_head.weight and no rescale (T5 v1.1 / flan-t5)

For each this script saves the HF folder (config.json + model.safetensors, the loader's test
input), runs one fixed batch (3 rows; source 12 tokens with a right-padded and a left-padded
row; target 7 tokens with two rows padded by -100 labels) and dumps the encoder output, the
logits, the loss, every parameter gradient, the weights after one AdamW step
(after_step.safetensors) and the losses and gradient norms of five clipped training steps.
t5-tiny-v1_0/golden.safetensors also holds HF's relative-position buckets for relative
positions -300..300 (bidirectional and causal, at the tiny config's 8/16 and at t5-base's
32/128), so the C bucket function is checked against torch beyond the batch's lengths.

    /usr/bin/python3 scripts/golden/gen_t5_golden.py

Everything is float32 on CPU with one thread, eager attention and deterministic
algorithms, so a rerun with the same versions writes the same numbers. The file layout and
the deterministic safetensors writer are gen_gpt2_golden.py's.

transformers 5.x note: T5Config forces tie_word_embeddings = True and records the v1.1
behaviour as scale_decoder_outputs = false; an lm_head.weight that differs from
shared.weight in the file is then loaded untied (HF warns and keeps both). The v1.1 folder is
saved that way (HF's own config.json), and the script reloads it to check that HF really
keeps the two apart before it computes anything.
"""

import argparse
import copy
import json
import os
import sys

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.models.t5.modeling_t5 import T5Attention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_golden import save_file, summarize, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SEED = 1234
PERTURB_SEED = 4321
BATCH_SEED = 99
NORM_PERTURB_STD = 0.1

B, S, T = 3, 12, 7
VOCAB = 100
PAD = 0
# Real source tokens per row and where they start (row 2 is left-padded).
SRC_LEN = [12, 8, 6]
SRC_START = [0, 0, 6]
# Real target tokens per row; the rest of each label row is -100.
TGT_LEN = [7, 5, 3]

LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
CLIP = 1.0
TRAIN_STEPS = 5

BUCKET_RANGE = 300


def make_config(variant):
    common = dict(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                  num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                  dropout_rate=0.0, layer_norm_epsilon=1e-6, initializer_factor=1.0,
                  pad_token_id=PAD, eos_token_id=1, decoder_start_token_id=PAD,
                  attn_implementation="eager")
    if variant == "v1_0":
        return T5Config(feed_forward_proj="relu", tie_word_embeddings=True, **common)
    return T5Config(feed_forward_proj="gated-gelu", tie_word_embeddings=False, **common)


def is_no_decay(name):
    # The T5LayerNorm weights skip weight decay (HF Trainer's rule for norm layers).
    return "layer_norm" in name


def build_model(variant):
    torch.manual_seed(SEED)
    model = T5ForConditionalGeneration(make_config(variant))
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    with torch.no_grad():
        # T5LayerNorm starts at 1: shift it so that a C model that ignored a norm weight
        # would not match by accident.
        for name, p in model.named_parameters():
            if is_no_decay(name):
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * NORM_PERTURB_STD)
        if variant == "v1_1":
            # v1.1 has its own LM head: untie it (HF ties at construction in 5.x).
            w = torch.randn(model.lm_head.weight.shape, generator=gen, dtype=torch.float32)
            model.lm_head.weight = torch.nn.Parameter(w)
    return model


def make_batch():
    gen = torch.Generator().manual_seed(BATCH_SEED)
    # Real tokens are never the pad id 0.
    input_ids = torch.randint(2, VOCAB, (B, S), generator=gen, dtype=torch.long)
    attention_mask = torch.zeros(B, S, dtype=torch.long)
    for b in range(B):
        lo, hi = SRC_START[b], SRC_START[b] + SRC_LEN[b]
        input_ids[b, :lo] = PAD
        input_ids[b, hi:] = PAD
        attention_mask[b, lo:hi] = 1
    labels = torch.randint(2, VOCAB, (B, T), generator=gen, dtype=torch.long)
    for b in range(B):
        labels[b, TGT_LEN[b]:] = -100
    return input_ids, attention_mask, labels


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_no_decay(name) else decay).append(p)
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                             foreach=False)


def bucket_tables():
    rel = torch.arange(-BUCKET_RANGE, BUCKET_RANGE + 1, dtype=torch.long)
    out = {"bucket_relpos": rel.to(torch.int32)}
    for nb, md in ((8, 16), (32, 128)):
        for bidir in (True, False):
            b = T5Attention._relative_position_bucket(rel, bidirectional=bidir, num_buckets=nb,
                                                      max_distance=md)
            name = f"buckets.{'bidir' if bidir else 'causal'}.{nb}.{md}"
            out[name] = b.to(torch.int32)
    return out


def gen_one(variant, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    built = build_model(variant)
    built.save_pretrained(out_dir, safe_serialization=True)
    # Everything below runs on the model HF loads from the folder: that is what a user gets.
    model = T5ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager")
    ref = built.state_dict()
    for k, v in model.state_dict().items():
        if not torch.equal(v, ref[k]):
            sys.exit(f"error: reloaded {k} differs from the generated model in {out_dir}")
    tied = model.lm_head.weight is model.shared.weight
    if tied != (variant == "v1_0"):
        sys.exit(f"error: {out_dir}: lm_head tied={tied}, expected {variant == 'v1_0'}")
    if model.config.scale_decoder_outputs != (variant == "v1_0"):
        sys.exit(f"error: {out_dir}: scale_decoder_outputs={model.config.scale_decoder_outputs}")
    init_state = copy.deepcopy(model.state_dict())
    input_ids, attention_mask, labels = make_batch()
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=True)

    model.train()
    model.zero_grad(set_to_none=True)
    out = model(**kw)
    out.loss.backward()

    tensors = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "labels": labels.to(torch.int32),
        "decoder_input_ids": model._shift_right(labels).to(torch.int32),
        "logits": out.logits.detach().clone(),
        "loss": out.loss.detach().reshape(1).clone(),
        # Encoder output after its final layer norm (B, S, d_model).
        "encoder_hidden": out.encoder_last_hidden_state.detach().clone(),
    }
    names = [name for name, _ in model.named_parameters()]
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
    if variant == "v1_0":
        tensors.update(bucket_tables())

    tensors = {k: v.contiguous() for k, v in tensors.items()}
    after = {k: v.contiguous() for k, v in after.items()}
    meta = versions()
    meta.update({
        "model": "T5ForConditionalGeneration",
        "variant": variant,
        "config": os.path.basename(out_dir) + "/config.json",
        "parameters": json.dumps(names),
        "lm_head": "tied to shared.weight" if tied else "own lm_head.weight",
        "scale_decoder_outputs": str(model.config.scale_decoder_outputs),
        "seed": str(SEED),
        "perturb_seed": str(PERTURB_SEED),
        "norm_perturb_std": str(NORM_PERTURB_STD),
        "batch_seed": str(BATCH_SEED),
        "src_len": json.dumps(SRC_LEN),
        "src_start": json.dumps(SRC_START),
        "tgt_len": json.dumps(TGT_LEN),
        "labels": "random ids in [2, 100), -100 after each row's target length",
        "decoder_input_ids": "HF _shift_right(labels): start token 0, -100 -> pad 0",
        "loss": "CrossEntropyLoss(ignore_index=-100), mean over the non-ignored target tokens",
        "attention": "eager",
        "optimizer": "torch.optim.AdamW foreach=False",
        "lr": str(LR),
        "beta1": str(BETAS[0]),
        "beta2": str(BETAS[1]),
        "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY),
        "no_decay": "every *layer_norm.weight",
        "clip_grad_norm": str(CLIP),
        "train_steps": str(TRAIN_STEPS),
        "layout": "HF state_dict names and shapes ([out, in] linears)",
    })
    save_file(tensors, os.path.join(out_dir, "golden.safetensors"), metadata=meta)
    save_file(after, os.path.join(out_dir, "after_step.safetensors"), metadata=meta)
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default tests/golden)")
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    dirs = [gen_one(v, os.path.join(args.out, f"t5-tiny-{v}")) for v in ("v1_0", "v1_1")]
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
