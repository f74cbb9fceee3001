#!/usr/bin/env python3
"""Generate the GPT-2 golden files that tests/test_golden_gpt2* compare against.

The C side of tunezoo is checked against Hugging Face Transformers on a tiny,
seeded GPT2ForSequenceClassification (2 layers, width 64, 4 heads, vocab 1000,
dropout 0). This script builds that model, saves it in HF format (the
converter's test input), runs one fixed padded batch and dumps the logits, the
loss, every parameter gradient, the weights after one AdamW step and the losses
and gradient norms of five clipped training steps. The weights after the
AdamW step are in after_step.safetensors beside golden.safetensors (kept apart
so that each file stays under 1 MiB). It also runs the real HF
checkpoint in tests/data/tiny-gpt2 (--tiny-gpt2 DIR to use another copy) on
five GPT-2 token ids so the loader and LM-head tying can be checked against HF
numbers.

The outputs are small and committed, and the torch and transformers versions go
into each file's metadata, so neither CI nor the C tests need Python. Run it
with the interpreter that scripts/setup_python.sh prepares:

    /usr/bin/python3 scripts/golden/gen_gpt2_golden.py

Everything is float32 on CPU with one thread and deterministic algorithms, so a
rerun with the same versions writes the same numbers.
"""

import argparse
import copy
import json
import os
import struct
import sys

import torch
import transformers
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

SEED = 1234
PERTURB_SEED = 4321
BATCH_SEED = 99
PERTURB_STD = 0.02

B, T = 3, 16
REAL_LENGTHS = [16, 11, 7]
LABELS = [1, 0, 1]
PAD_ID = 999

LR = 1e-3
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
CLIP = 1.0
TRAIN_STEPS = 5

TINY_GPT2_IDS = [[464, 2068, 7586, 21831, 18045]]  # "The quick brown fox jumps"


def tiny_config():
    return GPT2Config(
        vocab_size=1000,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_inner=None,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        summary_first_dropout=0.0,
        layer_norm_epsilon=1e-5,
        num_labels=2,
        pad_token_id=PAD_ID,
        eos_token_id=PAD_ID,
        bos_token_id=PAD_ID,
    )


def is_no_decay(name):
    # Biases and every LayerNorm parameter (ln_1, ln_2, ln_f) skip weight decay.
    return name.endswith(".bias") or ".ln_" in name or name.startswith("transformer.ln_f.")


def build_model():
    torch.manual_seed(SEED)
    model = GPT2ForSequenceClassification(tiny_config())
    # HF initialises biases to 0 and LayerNorm to 1/0; a C implementation that
    # ignored a bias or an LN affine would still match. Shift them off their
    # init so the golden test exercises every one of them.
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_no_decay(name):
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * PERTURB_STD)
    return model


def make_batch():
    gen = torch.Generator().manual_seed(BATCH_SEED)
    # Real tokens never equal the pad id, so HF's "first pad - 1" rule finds the last real token.
    input_ids = torch.randint(0, PAD_ID, (B, T), generator=gen, dtype=torch.long)
    attention_mask = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(REAL_LENGTHS):
        input_ids[b, n:] = PAD_ID
        attention_mask[b, :n] = 1
    labels = torch.tensor(LABELS, dtype=torch.long)
    return input_ids, attention_mask, labels


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_no_decay(name) else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": WEIGHT_DECAY},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                             foreach=False)


ST_DTYPES = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64"}


def save_file(tensors, path, metadata):
    """Write a safetensors file byte for byte the same on every run.

    safetensors.torch.save_file keeps the metadata in a hash map, so its key
    order (and the file's sha256) changes from run to run. Here the header is
    JSON with sorted keys, tensors are laid out in name order, and the header
    is padded with spaces to a multiple of 8 as the format allows.
    """
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, off = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-(8 + len(hjson)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__}


def gen_cls(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    model = build_model()
    model.save_pretrained(out_dir, safe_serialization=True)
    init_state = copy.deepcopy(model.state_dict())

    input_ids, attention_mask, labels = make_batch()

    # One forward/backward/AdamW step. Dropout is 0, so train mode changes nothing
    # numerically; it is used because that is how fine-tuning runs.
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                output_hidden_states=True, return_dict=True)
    out.loss.backward()

    # The index HF pools from, recomputed the way modeling_gpt2 does in this version.
    pooled_index = (torch.eq(input_ids, PAD_ID).int().argmax(-1) - 1) % T

    tensors = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "labels": labels.to(torch.int32),
        "pooled_index": pooled_index.to(torch.int32),
        "logits": out.logits.detach().clone(),
        "loss": out.loss.detach().reshape(1).clone(),
        # Last hidden state after ln_f (B, T, n_embd), for localising a mismatch.
        "hidden": out.hidden_states[-1].detach().clone(),
    }
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().clone()

    opt = make_optimizer(model)
    opt.step()
    for name, p in model.named_parameters():
        tensors["after_step." + name] = p.detach().clone()

    # Five clipped steps from the same initial weights on the same batch.
    model.load_state_dict(init_state)
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model)
    losses, norms = [], []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        o = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=True)
        o.loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(o.loss.item())
        norms.append(float(gn))
    tensors["losses5"] = torch.tensor(losses, dtype=torch.float32)
    tensors["gradnorm5"] = torch.tensor(norms, dtype=torch.float32)

    tensors = {k: v.contiguous() for k, v in tensors.items()}
    # after_step.* goes to its own file: with it golden.safetensors would be
    # 1.4 MB, and every committed golden file stays under 1 MiB.
    after = {k: tensors.pop(k) for k in list(tensors) if k.startswith("after_step.")}
    meta = versions()
    meta.update({
        "model": "GPT2ForSequenceClassification",
        "config": "gpt2-tiny-cls/config.json",
        "seed": str(SEED),
        "perturb_seed": str(PERTURB_SEED),
        "perturb_std": str(PERTURB_STD),
        "batch_seed": str(BATCH_SEED),
        "real_lengths": json.dumps(REAL_LENGTHS),
        "pad_token_id": str(PAD_ID),
        "pooling": "index = (argmax(input_ids == pad) - 1) mod T (first pad minus one; T-1 if no pad)",
        "positions": "0..T-1 for every row (position_ids not derived from attention_mask)",
        "loss": "mean cross-entropy over the batch of pooled logits",
        "optimizer": "torch.optim.AdamW foreach=False",
        "lr": str(LR),
        "beta1": str(BETAS[0]),
        "beta2": str(BETAS[1]),
        "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY),
        "no_decay": "every *.bias and every ln_1/ln_2/ln_f parameter",
        "clip_grad_norm": str(CLIP),
        "train_steps": str(TRAIN_STEPS),
        "layout": "HF state_dict names and shapes; Conv1D weights are [in, out]",
    })
    path = os.path.join(out_dir, "golden.safetensors")
    save_file(tensors, path, metadata=meta)
    save_file(after, os.path.join(out_dir, "after_step.safetensors"), metadata=meta)
    return path


def gen_lm(out_dir):
    """The same tiny config as GPT2LMHeadModel (lm_head tied to wte) on the same padded batch,
    labels = input_ids with -100 on padding: HF shifts them, so position t predicts token t+1.
    Logits, the loss (mean over the predicted tokens) and every parameter gradient (wte's holds
    the embedding's and the tied head's)."""
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(tiny_config())
    gen = torch.Generator().manual_seed(PERTURB_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_no_decay(name):
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * PERTURB_STD)
    model.save_pretrained(out_dir, safe_serialization=True)
    input_ids, attention_mask, _ = make_batch()
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_dict=True)
    out.loss.backward()
    tensors = {
        "input_ids": input_ids.to(torch.int32),
        "attention_mask": attention_mask.to(torch.int32),
        "labels": labels.to(torch.int32),
        "logits": out.logits.detach().clone(),
        "loss": out.loss.detach().reshape(1).clone(),
    }
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().clone()
    # greedy generation (HF's default: do_sample=False) from the first row's first 5 tokens
    model.eval()
    prompt = input_ids[:1, :5]
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                             pad_token_id=PAD_ID, output_logits=True, return_dict_in_generate=True)
    tensors["gen_prompt"] = prompt.to(torch.int32)
    tensors["gen_greedy"] = out.sequences[:, 5:].to(torch.int32)
    tensors["gen_logits"] = torch.stack(out.logits, dim=1).float()  # (1, 8, vocab): each step's raw logits
    meta = versions()
    meta.update({
        "generate": "gen_greedy: model.generate(gen_prompt, max_new_tokens=8, do_sample=False) minus the prompt; "
                    "gen_logits: its raw logits at each step (output_logits=True)",
        "model": "GPT2LMHeadModel (lm_head tied to transformer.wte)",
        "config": "gpt2-tiny-lm/config.json",
        "seed": str(SEED),
        "batch": "gpt2-tiny-cls's batch; labels = input_ids, -100 where attention_mask is 0",
        "loss": "mean cross-entropy of logits[:, :-1] against labels[:, 1:], -100 ignored",
        "layout": "HF state_dict names and shapes; Conv1D weights are [in, out]",
    })
    path = os.path.join(out_dir, "golden.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=meta)
    return path


def gen_tiny_gpt2(src_dir, out_path):
    model = GPT2LMHeadModel.from_pretrained(src_dir, torch_dtype=torch.float32)
    model.eval()
    ids = torch.tensor(TINY_GPT2_IDS, dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, return_dict=True)
    tensors = {
        "input_ids": ids.to(torch.int32).contiguous(),
        "logits": out.logits.float().contiguous(),
        # After ln_f, i.e. what the tied LM head multiplies by wte^T.
        "hidden": out.hidden_states[-1].float().contiguous(),
    }
    meta = versions()
    meta.update({
        "model": "GPT2LMHeadModel",
        "source": "shared/data/tiny-gpt2 (from_pretrained, eval mode, no attention_mask)",
        "hidden": "last hidden state after ln_f",
    })
    save_file(tensors, out_path, metadata=meta)
    return out_path


def summarize(path):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        keys = list(f.keys())
    t = load_file(path)
    print(f"== {os.path.relpath(path, REPO)} ({os.path.getsize(path)} bytes, {len(keys)} tensors)")
    print(f"   torch {meta.get('torch')}  transformers {meta.get('transformers')}")
    for k in keys:
        v = t[k]
        desc = f"{str(v.dtype).replace('torch.', ''):8s} {list(v.shape)}"
        if v.numel() <= 6:
            desc += f"  {v.flatten().tolist()}"
        elif v.is_floating_point():
            desc += f"  absmax={v.abs().max().item():.4g}"
        print(f"   {k:55s} {desc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden"),
                    help="output folder (default tests/golden)")
    ap.add_argument("--tiny-gpt2", default=os.path.join(REPO, "tests", "data", "tiny-gpt2"),
                    help="HF tiny-gpt2 folder (default tests/data/tiny-gpt2)")
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    ap.add_argument("--only", choices=["cls", "lm", "tiny"], default="",
                    help="write one golden only (the others stay as they are)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    if args.only == "lm":
        path = gen_lm(os.path.join(args.out, "gpt2-tiny-lm"))
        for fn in os.listdir(os.path.dirname(path)):
            f = os.path.join(os.path.dirname(path), fn)
            os.chmod(f, 0o644)
            if os.path.getsize(f) >= 1 << 20:
                sys.exit(f"error: {f} is over 1 MiB")
        if not args.quiet:
            summarize(path)
        return
    paths = [gen_cls(os.path.join(args.out, "gpt2-tiny-cls")), gen_lm(os.path.join(args.out, "gpt2-tiny-lm"))]
    if os.path.isdir(args.tiny_gpt2):
        paths.append(gen_tiny_gpt2(args.tiny_gpt2, os.path.join(args.out, "tiny-gpt2-logits.safetensors")))
    else:
        print(f"warning: {args.tiny_gpt2} not found; tiny-gpt2-logits.safetensors not written",
              file=sys.stderr)

    # Sanity: the saved HF folder reloads to the same initial weights the golden
    # run started from, and every file stays small.
    reloaded = GPT2ForSequenceClassification.from_pretrained(os.path.join(args.out, "gpt2-tiny-cls"))
    ref = build_model().state_dict()
    for k, v in reloaded.state_dict().items():
        if k in ref and not torch.equal(v, ref[k]):
            sys.exit(f"error: reloaded {k} differs from the generated model")
    for root, _, files in os.walk(os.path.join(args.out, "gpt2-tiny-cls")):
        for fn in files:
            paths.append(os.path.join(root, fn))
    for p in sorted(set(paths)):
        os.chmod(p, 0o644)
        size = os.path.getsize(p)
        if size >= 1 << 20:
            sys.exit(f"error: {p} is {size} bytes, over 1 MiB")
        if not args.quiet and p.endswith(".safetensors"):
            summarize(p)


if __name__ == "__main__":
    main()
