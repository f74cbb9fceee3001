#!/usr/bin/env python3
"""Write bf16_autocast.safetensors beside each tiny model's fp32 golden: PyTorch's CPU bf16
autocast on the same model and batch, for the C tests that run our models at
rt_set_precision(be, RT_BF16).

Every model family's fp32 golden folder already holds the HF (or FlagAI) model and its batch.
This script loads both from there (it builds nothing itself, so it cannot drift from the fp32
generators), checks that an fp32 run on this torch reproduces the stored fp32 logits and loss,
then runs forward and loss under

    torch.autocast("cpu", dtype=torch.bfloat16)     # torch.cpu.amp.autocast before torch 1.10

and backward outside it (as torch recommends), and stores the loss, the logits and a few
parameter gradients, all as fp32. The parameters stay fp32; autocast rounds the inputs of
matmuls/linears to bf16 and most ops then run in bf16 (torch's autocast op lists decide which).

    /usr/bin/python3 scripts/golden/gen_bf16_autocast_golden.py [--flagai /tmp/flagai-dl/x]

--flagai names FlagAI 1.8's unpacked wheel (flagai_wheel.py says how to get it); without it
glm-tiny is skipped with a warning. One thread, deterministic algorithms, gen_gpt2_golden.py's
byte-stable writer: a rerun with the same versions writes the same bytes.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_golden import save_file, summarize, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "golden")
OUT_NAME = "bf16_autocast.safetensors"

# How close an fp32 run on this stack must come to the stored fp32 golden (made, for T5 and
# GLM, with another torch): the C tests' fp32 forward tolerance. Far below bf16's effects.
FP32_ATOL, FP32_RTOL = 1e-5, 1e-4

# The gradients recorded per folder (HF names): the bottom of the network (an embedding, whose
# gradient has come back through every block), a first-block matrix and bias, a norm weight, a
# last-block piece and the head. Kept few so that each file stays a few tens of KB.
GRADS = {
    "gpt2-tiny-cls": ["transformer.wpe.weight", "transformer.h.0.attn.c_attn.bias",
                      "transformer.h.0.attn.c_proj.weight", "transformer.h.0.ln_1.weight",
                      "transformer.h.1.mlp.c_fc.bias", "transformer.ln_f.weight", "score.weight"],
    "bert-tiny-cls": ["bert.embeddings.position_embeddings.weight",
                      "bert.encoder.layer.0.attention.output.dense.weight",
                      "bert.encoder.layer.0.attention.output.LayerNorm.weight",
                      "bert.encoder.layer.1.intermediate.dense.bias", "bert.pooler.dense.bias",
                      "classifier.weight"],
    "t5-tiny-v1_0": ["shared.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                     "encoder.block.0.layer.0.SelfAttention.o.weight", "encoder.final_layer_norm.weight",
                     "decoder.block.1.layer.1.EncDecAttention.q.weight",
                     "decoder.block.1.layer.2.DenseReluDense.wo.weight", "decoder.final_layer_norm.weight"],
    "t5-tiny-v1_1": ["shared.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                     "encoder.block.0.layer.0.SelfAttention.o.weight", "encoder.final_layer_norm.weight",
                     "decoder.block.1.layer.1.EncDecAttention.q.weight",
                     "decoder.block.1.layer.2.DenseReluDense.wi_0.weight", "decoder.final_layer_norm.weight",
                     "lm_head.weight"],
    "glm-tiny": ["word_embeddings.weight", "transformer.block_position_embeddings.weight",
                 "transformer.layers.0.attention.query_key_value.bias", "transformer.layers.0.input_layernorm.weight",
                 "transformer.layers.1.mlp.dense_h_to_4h.bias", "transformer.final_layernorm.weight"],
}


def autocast_bf16():
    if hasattr(torch, "autocast"):
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.cpu.amp.autocast(dtype=torch.bfloat16)


def long_(t):
    return t.to(torch.long)


# ---------------------------------------------------------------- the families
# Each returns (model, run) where run() does one forward and returns (loss, logits), both as the
# model produced them; the batch is the fp32 golden's, read from golden.safetensors.

def gpt2(d, g):
    from transformers import GPT2ForSequenceClassification
    model = GPT2ForSequenceClassification.from_pretrained(d, attn_implementation="eager")
    kw = dict(input_ids=long_(g["input_ids"]), attention_mask=long_(g["attention_mask"]),
              labels=long_(g["labels"]), return_dict=True)
    return model, lambda: (lambda o: (o.loss, o.logits))(model(**kw))


def bert(d, g):
    from transformers import BertForSequenceClassification
    model = BertForSequenceClassification.from_pretrained(d, attn_implementation="eager")
    kw = dict(input_ids=long_(g["input_ids"]), attention_mask=long_(g["attention_mask"]),
              token_type_ids=long_(g["token_type_ids"]), labels=long_(g["labels"]), return_dict=True)
    return model, lambda: (lambda o: (o.loss, o.logits))(model(**kw))


def t5(d, g, v1_1):
    from transformers import T5ForConditionalGeneration
    extra = {}
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if v1_1 and cfg.get("tie_word_embeddings"):
        # transformers 5 writes tie_word_embeddings true (and scale_decoder_outputs false) for
        # v1.1 and keeps the file's own lm_head; 4.x would tie it to shared and rescale. Say
        # what the folder means (gen_t5_golden.py's note); the fp32 check below confirms it.
        extra["tie_word_embeddings"] = False
    model = T5ForConditionalGeneration.from_pretrained(d, attn_implementation="eager", **extra)
    if (model.lm_head.weight is model.shared.weight) == v1_1:
        sys.exit(f"error: {d}: lm_head tied = {not v1_1} after loading")
    kw = dict(input_ids=long_(g["input_ids"]), attention_mask=long_(g["attention_mask"]),
              labels=long_(g["labels"]), return_dict=True)
    return model, lambda: (lambda o: (o.loss, o.logits))(model(**kw))


def glm(d, g, flagai_root):
    from flagai_wheel import load_flagai
    glm_model, base_model, _ = load_flagai(flagai_root)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    model = glm_model.GLMModel(base_model.change_json_to_cls(cfg))
    missing, unexpected = model.load_state_dict(load_file(os.path.join(d, "model.safetensors")), strict=True)
    assert not missing and not unexpected
    ids, pos, seps, labels = (long_(g[k]) for k in ("input_ids", "position_ids", "attention_mask", "labels"))

    def run():
        logits = model(input_ids=ids, position_ids=pos, attention_mask=seps)["logits"]
        V = logits.shape[-1]
        # gen_glm_golden.py's lm_loss (FlagAI's own: cross_entropy on logits.float())
        loss = F.cross_entropy(logits.float().reshape(-1, V), labels.reshape(-1), ignore_index=-100)
        return loss, logits
    return model, run


# ---------------------------------------------------------------- one folder

def rel_l2(a, ref):
    return (a.double() - ref.double()).norm().item() / max(ref.double().norm().item(), 1e-30)


def gen_one(name, make, quiet):
    d = os.path.join(GOLDEN, name)
    g = load_file(os.path.join(d, "golden.safetensors"))
    model, run = make(d, g)
    model.train()  # dropout is 0 in every tiny config; train mode as the fp32 goldens
    params = dict(model.named_parameters())
    for n in GRADS[name]:
        if n not in params or "grad." + n not in g:
            sys.exit(f"error: {name}: no parameter {n}")

    # fp32 on this stack first: the model and batch must be the fp32 golden's
    model.zero_grad(set_to_none=True)
    loss32, logits32 = run()
    loss32.backward()
    for what, got, ref, atol, rtol in [("logits", logits32, g["logits"], FP32_ATOL, FP32_RTOL),
                                       ("loss", loss32.reshape(1), g["loss"], FP32_ATOL, FP32_RTOL)] + \
            [("grad." + n, params[n].grad, g["grad." + n], 10 * FP32_ATOL, 10 * FP32_RTOL) for n in GRADS[name]]:
        bad = ((got.detach() - ref).abs() - (atol + rtol * ref.abs())).max().item()
        if bad > 0:
            sys.exit(f"error: {name}: fp32 {what} misses the stored golden by {bad:.3g} beyond tolerance")

    # the same under bf16 autocast; backward outside the context
    model.zero_grad(set_to_none=True)
    with autocast_bf16():
        loss, logits = run()
    low = logits.dtype
    loss.backward()
    tensors = {"loss": loss.detach().float().reshape(1).clone(),
               "logits": logits.detach().float().contiguous().clone()}
    for n in GRADS[name]:
        tensors["grad." + n] = params[n].grad.detach().float().contiguous().clone()

    meta = versions()
    meta.update({
        "autocast": "torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss; backward outside",
        "logits_dtype_under_autocast": str(low).replace("torch.", ""),
        "source": f"{name}/model.safetensors and the batch in {name}/golden.safetensors",
        "stored": "fp32 (the bf16 logits widened exactly; parameters and their gradients are fp32)",
    })
    if name == "glm-tiny":
        meta["flagai"] = "1.8.0"
    path = os.path.join(d, OUT_NAME)
    save_file(tensors, path, metadata=meta)
    os.chmod(path, 0o644)
    # what the C tests' bands are measured from: the distance autocast moves each value
    line = [f"{k} {rel_l2(v, g[k]):.3g}" for k, v in sorted(tensors.items())]
    print(f"{name}: logits {low}; rel L2 fp32 golden -> autocast: " + ", ".join(line))
    if not quiet:
        summarize(path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flagai", help="folder holding FlagAI 1.8's unpacked wheel (the one with flagai/); "
                    "without it glm-tiny is skipped")
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    jobs = [("gpt2-tiny-cls", gpt2), ("bert-tiny-cls", bert),
            ("t5-tiny-v1_0", lambda d, g: t5(d, g, False)), ("t5-tiny-v1_1", lambda d, g: t5(d, g, True))]
    if a.flagai:
        jobs.append(("glm-tiny", lambda d, g: glm(d, g, os.path.abspath(a.flagai))))
    else:
        print("warning: no --flagai: glm-tiny/" + OUT_NAME + " not written", file=sys.stderr)
    for name, make in jobs:
        path = gen_one(name, make, a.quiet)
        if os.path.getsize(path) >= 64 << 10:
            sys.exit(f"error: {path} is {os.path.getsize(path)} bytes; keep these under 64 KiB")


if __name__ == "__main__":
    main()
