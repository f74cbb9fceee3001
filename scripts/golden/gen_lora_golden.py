#!/usr/bin/env python3
"""Generate the LoRA goldens (issue 36) that tunezoo's LoRA is to match: HF PEFT on the tiny
GPT-2 classifier of tests/golden/gpt2-tiny-cls (its committed model.safetensors is the base), and
with --family on the tiny BERT and RoBERTa classifiers, the tiny T5 v1.1 and the tiny GLM
(FlagAI's own GLMModel from its unpacked wheel, --flagai DIR as gen_glm_golden.py takes it; PEFT
wraps the plain module, task_type none) (FAMILIES below).

PEFT wraps the base with LoraConfig(r=4, lora_alpha=8, lora_dropout=0, target_modules c_attn,
c_proj and c_fc: every linear of a block, both c_proj included; GPT-2's Conv1D, so
fan_in_fan_out) and task_type SEQ_CLS, whose modules_to_save keeps the `score` head trainable.
The adapters start from random A and B (init_lora_weights=False, seeded), not PEFT's B = 0, so
that A's gradient is not zero and a golden of it means something. Written to
tests/golden/gpt2-tiny-lora/:

- adapter/: the PEFT folder of those initial adapters (adapter_config.json,
  adapter_model.safetensors with PEFT's names), which tunezoo's --lora-from must load;
- golden.safetensors: the batch (gpt2-tiny-cls's), the logits, the loss, the gradient of every
  trainable tensor (`grad.NAME`, NAME as in the adapter file), each one after one AdamW step
  (`after_step.NAME`), and the losses and gradient norms of five clipped steps;
- peft_default_init.safetensors: PEFT's own initialisation of the same model (A Kaiming-uniform
  with a = sqrt(5), B zero), for the shape of the distribution and B's zeros;
- merged.safetensors: PEFT's merge_and_unload of adapter/ over the base, the tensors it changed
  (what --save-hf with LoRA writes), by --merged alone;
- from_tunezoo.safetensors: the logits PEFT gives on the same batch with the folder tunezoo wrote,
  from-tunezoo/ (test_golden_lora's round trip with TZ_LORA_EXPORT set: the adapters after one
  AdamW step of tunezoo's), loaded by PeftModel.from_pretrained over the base; written by
  --from-tunezoo alone, so the other files stay as they are.

    python3 scripts/golden/gen_lora_golden.py
    TZ_LORA_EXPORT=$PWD/tests/golden/gpt2-tiny-lora/from-tunezoo build/tests/test_golden_lora
    python3 scripts/golden/gen_lora_golden.py --from-tunezoo

Needs torch, transformers and peft (versions go into the metadata). Float32 on CPU with one
thread and deterministic algorithms: a rerun with the same versions writes the same numbers.
"""

import argparse
import json
import os
import sys

import peft
import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import (BertForSequenceClassification, GPT2ForSequenceClassification, RobertaForSequenceClassification,
                          T5ForConditionalGeneration)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_golden import (BETAS, CLIP, EPS, LR, TRAIN_STEPS, WEIGHT_DECAY, is_no_decay,  # noqa: E402
                             save_file, summarize, versions)
from flagai_wheel import load_flagai  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "golden")

R, ALPHA = 4, 8
ADAPTER_SEED = 2468
# family: (the base's folder, its class, the targets). GPT-2: every linear of a block (both c_proj).
# BERT: query, key and value (tunezoo's one fused projection) and the three dense layers of a
# block, not the pooler's ("output.dense" ends both attention.output.dense and output.dense).
# RoBERTa: PEFT's default (query, value); SEQ_CLS saves its whole classifier head (dense and
# out_proj) through modules_to_save "classifier". T5 (v1.1: gated, its own LM head): every linear
# of a block, the cross-attention's included, on tests/golden/t5-tiny-v1_1's batch (labels padded
# with -100, decoder inputs HF's shift of them); SEQ_2_SEQ_LM saves no module.
FAMILIES = {
    "gpt2": ("gpt2-tiny-cls", GPT2ForSequenceClassification, ["c_attn", "c_proj", "c_fc"], "SEQ_CLS"),
    "bert": ("bert-tiny-cls", BertForSequenceClassification,
             ["query", "key", "value", "output.dense", "intermediate.dense"], "SEQ_CLS"),
    "roberta": ("roberta-tiny-cls", RobertaForSequenceClassification, ["query", "value"], "SEQ_CLS"),
    "t5": ("t5-tiny-v1_1", T5ForConditionalGeneration, ["q", "k", "v", "o", "wi_0", "wi_1", "wo"], "SEQ_2_SEQ_LM"),
    # GLM: every linear of a layer; its LM loss over the blank's labels (gen_glm_golden.py's batch)
    "glm": ("glm-tiny", None, ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"], None),
}
BASE = os.path.join(GOLDEN, "gpt2-tiny-cls")
MODEL_CLASS = GPT2ForSequenceClassification
TARGETS, TASK = FAMILIES["gpt2"][2], FAMILIES["gpt2"][3]
FLAGAI = None  # GLM: the folder holding FlagAI's unpacked wheel


def base_model():
    if MODEL_CLASS is None:  # FlagAI's GLMModel over the golden's config and weights
        glm_model, base, _ = load_flagai(FLAGAI)
        with open(os.path.join(BASE, "config.json")) as f:
            cfg = json.load(f)
        model = glm_model.GLMModel(base.change_json_to_cls(cfg))
        model.load_state_dict(load_file(os.path.join(BASE, "model.safetensors")))
        model.config = dict(cfg, model_type="glm")  # a dict, as PEFT reads a config (FlagAI's ConfigObj is not one)
        return model
    # T5 as gen_t5_golden.py builds it (eager attention); the others as their goldens did
    extra = {"attn_implementation": "eager"} if MODEL_CLASS is T5ForConditionalGeneration else {}
    return MODEL_CLASS.from_pretrained(BASE, **extra)


def forward(model, batch):
    """(logits, loss) of the batch: HF's outputs, or GLM's logits and the mean cross-entropy of
    the labelled tokens (FlagAI's loss, gen_glm_golden.py's lm_loss)."""
    if MODEL_CLASS is not None:
        out = model(**batch)
        return out.logits, out.loss
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                   attention_mask=batch["attention_mask"])["logits"]
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)


# The random B (nn.Linear's init, |B| up to 1/sqrt(r)) scaled per family: T5's 36 adapters at full
# size move its logits to |21| (loss 18), where fp32's rounding across four tp shards alone reaches
# the 1e-5 tolerance on some CPUs; a tenth keeps them in the base's range.
B_SCALE = {"t5": 0.1}
FAMILY = "gpt2"


def lora_model(init):
    base = base_model().eval()
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, task_type=TASK,
                     init_lora_weights=init)
    torch.manual_seed(ADAPTER_SEED)
    model = get_peft_model(base, cfg)
    if not init and FAMILY in B_SCALE:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.mul_(B_SCALE[FAMILY])
    return model


def trainable(model):
    # PEFT's names inside the adapter file: the adapter's name ("default") dropped, and a
    # modules_to_save copy under the module's own name
    return {n.replace(".modules_to_save.default", "").replace(".default", ""): p
            for n, p in model.named_parameters() if p.requires_grad}


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if is_no_decay(name.split("base_model.model.")[-1]) else decay).append(p)
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="gpt2")
    ap.add_argument("--out", default="", help="default: tests/golden/FAMILY-tiny-lora")
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    ap.add_argument("--from-tunezoo", action="store_true",
                    help="only PEFT's logits with OUT/from-tunezoo (a folder tunezoo wrote)")
    ap.add_argument("--bf16-autocast", action="store_true",
                    help="only OUT/bf16_autocast.safetensors: PEFT's model with OUT/adapter under torch's CPU bf16 "
                         "autocast (logits, loss, every trainable gradient), for the bf16 band tests")
    ap.add_argument("--merged", action="store_true",
                    help="only OUT/merged.safetensors: PEFT's merge_and_unload of OUT/adapter, the weights it changed")
    ap.add_argument("--flagai", default="", help="--family glm: the folder holding FlagAI 1.8's unpacked wheel")
    a = ap.parse_args()
    global BASE, MODEL_CLASS, TARGETS, TASK, FLAGAI, FAMILY
    base_dir, MODEL_CLASS, TARGETS, TASK = FAMILIES[a.family]
    FAMILY = a.family
    if a.family == "glm" and not a.flagai:
        sys.exit("error: --family glm needs --flagai DIR (see scripts/golden/flagai_wheel.py)")
    FLAGAI = os.path.abspath(a.flagai) if a.flagai else None
    BASE = os.path.join(GOLDEN, base_dir)
    a.out = a.out or os.path.join(GOLDEN, f"{a.family}-tiny-lora")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(a.out, exist_ok=True)

    g = load_file(os.path.join(BASE, "golden.safetensors"))
    batch = dict(input_ids=g["input_ids"].long(), attention_mask=g["attention_mask"].long(),
                 labels=g["labels"].long())
    if a.family == "bert":  # RoBERTa's type ids are all 0, as HF fills them
        batch["token_type_ids"] = g["token_type_ids"].long()
    if a.family == "glm":  # GLM's two position rows; attention_mask is each row's sep
        batch["position_ids"] = g["position_ids"].long()
    if a.bf16_autocast:  # forward and loss under autocast, backward outside (as torch recommends)
        model = PeftModel.from_pretrained(base_model(), os.path.join(a.out, "adapter"), is_trainable=True)
        model.train()
        with torch.no_grad():
            ref = load_file(os.path.join(a.out, "golden.safetensors"))
            if not torch.allclose(forward(model, batch)[0], ref["logits"], atol=1e-5, rtol=1e-4):
                sys.exit("error: an fp32 run does not reproduce golden.safetensors' logits on this stack")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, loss = forward(model, batch)
        loss.float().backward()
        tensors = {"logits": logits.detach().float().contiguous(), "loss": loss.detach().float().reshape(1)}
        for name, p in trainable(model).items():
            tensors["grad." + name] = p.grad.detach().float().contiguous()
        meta = versions()
        meta.update({"peft": peft.__version__, "adapter": f"tests/golden/{a.family}-tiny-lora/adapter",
                     "autocast": 'torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss; backward outside',
                     "names": "grad.NAME: NAME as in adapter/adapter_model.safetensors; all stored as float32"})
        save_file(tensors, os.path.join(a.out, "bf16_autocast.safetensors"), meta)
        print("bf16 autocast: loss", loss.item(), "vs fp32", ref["loss"].item())
        return
    if a.merged:  # what --save-hf with LoRA must write: the base's weights with B A folded in
        base_state = {k: v.clone() for k, v in base_model().state_dict().items()}
        merged = PeftModel.from_pretrained(base_model(), os.path.join(a.out, "adapter")).merge_and_unload()
        changed = {k: v.detach().clone().contiguous() for k, v in merged.state_dict().items()
                   if k in base_state and not torch.equal(v, base_state[k])}
        meta = versions()
        meta.update({"peft": peft.__version__, "adapter": f"tests/golden/{a.family}-tiny-lora/adapter",
                     "base": f"tests/golden/{base_dir}/model.safetensors",
                     "what": "PeftModel.from_pretrained(base, adapter).merge_and_unload().state_dict(): the tensors "
                             "that differ from the base's, under the base's names"})
        save_file(changed, os.path.join(a.out, "merged.safetensors"), meta)
        print("merged:", len(changed), "tensors changed:", sorted(changed)[:4], "...")
        return
    if a.from_tunezoo:
        folder = os.path.join(a.out, "from-tunezoo")
        model = PeftModel.from_pretrained(base_model(), folder).eval()
        with torch.no_grad():  # T5's decoder inputs come from the labels; the classifiers' logits do not
            logits = forward(model, batch)[0]
        meta = versions()
        meta.update({"peft": peft.__version__, "folder": f"tests/golden/{a.family}-tiny-lora/from-tunezoo",
                     "base": f"tests/golden/{base_dir}/model.safetensors"})
        save_file({"logits": logits.contiguous()}, os.path.join(a.out, "from_tunezoo.safetensors"), meta)
        print("from_tunezoo logits", logits.tolist())
        return

    model = lora_model(False)
    model.train()
    adapter_dir = os.path.join(a.out, "adapter")
    model.save_pretrained(adapter_dir)
    os.remove(os.path.join(adapter_dir, "README.md"))  # PEFT's model card template
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        adapter_cfg = json.load(f)
    adapter_cfg["base_model_name_or_path"] = f"tests/golden/{base_dir}"  # not this machine's path
    adapter_cfg["target_modules"] = sorted(adapter_cfg["target_modules"])  # PEFT writes a set's order
    with open(os.path.join(adapter_dir, "adapter_config.json"), "w") as f:
        json.dump(adapter_cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    init = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    logits, loss = forward(model, batch)
    loss.backward()
    # the folder loads back in PEFT to the same model
    reloaded = PeftModel.from_pretrained(base_model(), adapter_dir).eval()
    with torch.no_grad():
        if not torch.equal(forward(reloaded, batch)[0], logits):
            sys.exit("error: the saved adapter folder does not reload to the same logits")
    tensors = {k: g[k] for k in ("input_ids", "attention_mask", "token_type_ids", "position_ids", "labels") if k in g}
    tensors.update({"logits": logits.detach().clone(), "loss": loss.detach().reshape(1).clone()})
    for name, p in trainable(model).items():
        tensors["grad." + name] = p.grad.detach().clone()
    opt = make_optimizer(model)
    opt.step()
    for name, p in trainable(model).items():
        tensors["after_step." + name] = p.detach().clone()

    with torch.no_grad():  # five clipped steps from the initial adapters
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(init[n])
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model)
    losses, norms = [], []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = forward(model, batch)[1]
        step_loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], CLIP)))
        opt.step()
        losses.append(step_loss.item())
    tensors["losses5"] = torch.tensor(losses, dtype=torch.float32)
    tensors["gradnorm5"] = torch.tensor(norms, dtype=torch.float32)

    meta = versions()
    meta.update({
        "peft": peft.__version__,
        "base": f"tests/golden/{base_dir}/model.safetensors",
        "batch": f"tests/golden/{base_dir}/golden.safetensors input_ids, attention_mask, labels",
        "lora": json.dumps({"r": R, "lora_alpha": ALPHA, "lora_dropout": 0.0, "target_modules": TARGETS,
                            "task_type": TASK, "init_lora_weights": False, "seed": ADAPTER_SEED,
                            "lora_B_scaled_by": B_SCALE.get(a.family, 1.0)}),
        "scale": str(ALPHA / R),
        "trainable": "every lora_A and lora_B" + ("" if TASK == "SEQ_2_SEQ_LM" else
                                                  ", and the head (modules_to_save)"),
        "optimizer": "torch.optim.AdamW foreach=False over the trainable tensors",
        "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]), "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY), "no_decay": "none of the trainable tensors is a bias or a LayerNorm",
        "clip_grad_norm": str(CLIP), "train_steps": str(TRAIN_STEPS),
        "names": "grad.NAME and after_step.NAME: NAME as in adapter/adapter_model.safetensors",
    })
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(a.out, "golden.safetensors"), meta)

    default = lora_model(True)  # PEFT's own init: B zero, A Kaiming-uniform
    save_file({n: p.detach().clone().contiguous() for n, p in trainable(default).items() if "lora_" in n},
              os.path.join(a.out, "peft_default_init.safetensors"), meta)

    for root, _, files in os.walk(a.out):
        for fn in files:
            p = os.path.join(root, fn)
            os.chmod(p, 0o644)
            if os.path.getsize(p) >= 1 << 20:
                sys.exit(f"error: {p} is over 1 MiB")
    if not a.quiet:
        summarize(os.path.join(a.out, "golden.safetensors"))


if __name__ == "__main__":
    main()
