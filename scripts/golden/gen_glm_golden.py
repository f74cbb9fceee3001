#!/usr/bin/python3
"""Writes tests/golden/glm-tiny/: FlagAI 1.8's own GLMModel (run from its unpacked wheel, see
flagai_wheel.py) on a tiny seeded config and one blank-infilling batch, for models/glm/glm.c.

    /usr/bin/python3 scripts/golden/gen_glm_golden.py /tmp/flagai-dl/x

Files: config.json (GLMModel's 19 fields), model.safetensors (the initial parameters, FlagAI
state-dict names), golden.safetensors (batch, FlagAI's ltor mask, logits, hidden, loss,
grad.<name>, cloze scores, the 5-step clipped run), after_step.safetensors (after_step.<name>
after one AdamW step) and README.md. Conventions (file names, AdamW hyperparameters, the
5-step loop, the deterministic safetensors writer) are gen_gpt2_golden.py's.

Besides writing, the script checks what the README claims: an independent plain-torch forward
(tanh GELU, LayerNorm eps 1e-5, q.(k/sqrt(d)), masked scores set to -65504, logits through the
tied word embedding without bias) reproduces FlagAI's logits; FlagAI's own loss (labels=)
equals the ignore_index=-100 cross-entropy; and changing single tokens moves exactly the
logits the sep mask says it should.
"""
import argparse
import copy
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
import safetensors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flagai_wheel import GLM_CONFIG, load_flagai  # noqa: E402
from gen_gpt2_golden import save_file, summarize, versions  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

CONFIG = dict(GLM_CONFIG, embedding_dropout_prob=0.0, attention_dropout_prob=0.0,
              output_dropout_prob=0.0, max_sequence_length=32)

SEED = 1234          # torch.manual_seed before GLMModel() (its own init, then overwritten)
PARAM_SEED = 4321    # the generator every parameter is redrawn from
BATCH_SEED = 99
WEIGHT_STD = 0.02    # weights, embeddings and Linear biases
LN_STD = 0.1         # LayerNorm weight 1 + LN_STD*randn, bias LN_STD*randn
# Larger for the two matrices whose outputs feed a nonlinearity: at 0.02 the softmax is nearly
# uniform and GELU sees |x| << 1, so a wrong score scale or erf-vs-tanh GELU would stay inside
# the C tests' tolerances (checked in check_semantics).
STD_OVERRIDE = {"attention.query_key_value.weight": 0.2, "mlp.dense_h_to_4h.weight": 0.2}
# What the C golden tests allow (tests/test_golden_gpt2.c FWD_ATOL/FWD_RTOL): every
# alternative semantics below must move some logit by more than this.
C_ATOL, C_RTOL = 1e-5, 1e-4

LR = 1e-3            # the AdamW run is gen_gpt2_golden.py's
BETAS = (0.9, 0.999)
EPS = 1e-8
WEIGHT_DECAY = 0.01
CLIP = 1.0
TRAIN_STEPS = 5

B, T = 3, 12
PAD, CLS, EOS, MASK, SOP, EOP = 0, 1, 2, 3, 4, 5   # ids of this toy vocabulary (not GLM's)
FIRST_WORD = 6                                    # ordinary tokens are 6..127
SEPS = [12, 7, 4]            # GLM's sep per sample: context length
MASK_POS = [5, 3, 2]         # where [MASK] sits in each context
SPAN_LEN = [0, 4, 8]         # generated span tokens ([sop] + answer) after sep
CLOZE_IDS = [40, 77, 101]    # K = 3 verbalizer ids
CLOZE_POS = [5, 7, 2]        # sample 0: its [MASK]; 1: its [sop] (= sep); 2: its [MASK]
IGNORE = -100


def is_no_decay(name):
    # HF Trainer's rule, as the other goldens: biases and every LayerNorm parameter.
    return name.endswith(".bias") or "layernorm" in name


def build_model(glm_model, base_model):
    torch.manual_seed(SEED)
    model = glm_model.GLMModel(base_model.change_json_to_cls(dict(CONFIG)))
    # FlagAI inits biases to 0 and LayerNorms to 1/0: redraw everything so that a dropped
    # bias or LN affine, or a swapped tensor, shows.
    g = torch.Generator().manual_seed(PARAM_SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if "layernorm" in name:
                p.copy_(r * LN_STD + (1.0 if name.endswith(".weight") else 0.0))
            else:
                std = next((v for k, v in STD_OVERRIDE.items() if name.endswith(k)), WEIGHT_STD)
                p.copy_(r * std)
    return model


def make_batch():
    """A GLM blank-infilling batch. Sample b: context [CLS] w.. [MASK] w.. of length SEPS[b]
    (positions 0..sep-1, block position 0), then the span [sop] y1..y(n-1) at position
    MASK_POS[b] and block positions 1..n, labels y1..y(n-1) [eop] on the span; then [pad]
    (position 0, block 0, label -100). Sample 0 is all context (sep = T), the single-token
    cloze layout, with its one label at the [MASK]."""
    g = torch.Generator().manual_seed(BATCH_SEED)
    vocab = CONFIG["vocab_size"]
    ids = torch.full((B, T), PAD, dtype=torch.long)
    pos = torch.zeros(B, 2, T, dtype=torch.long)
    labels = torch.full((B, T), IGNORE, dtype=torch.long)
    for b in range(B):
        sep, mp, n = SEPS[b], MASK_POS[b], SPAN_LEN[b]
        ctx = torch.randint(FIRST_WORD, vocab, (sep,), generator=g)
        ctx[0], ctx[mp] = CLS, MASK
        ids[b, :sep] = ctx
        pos[b, 0, :sep] = torch.arange(sep)
        if n:
            answer = torch.randint(FIRST_WORD, vocab, (n - 1,), generator=g)
            ids[b, sep:sep + n] = torch.cat([torch.tensor([SOP]), answer])
            labels[b, sep:sep + n] = torch.cat([answer, torch.tensor([EOP])])
            pos[b, 0, sep:sep + n] = mp
            pos[b, 1, sep:sep + n] = torch.arange(1, n + 1)
        else:
            labels[b, mp] = CLOZE_IDS[b % len(CLOZE_IDS)]
        assert sep + n <= T
    return ids, pos, torch.tensor(SEPS, dtype=torch.long), labels


def lm_loss(logits, labels):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=IGNORE)


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_no_decay(name) else decay).append(p)
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                             foreach=False)


# ---------------------------------------------------------------- independent reference

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def sep_mask(seps, t):
    """[B, T, T]: query i sees key j when j < sep (the context) or j <= i (causal)."""
    i = torch.arange(t).view(1, t, 1)
    j = torch.arange(t).view(1, 1, t)
    return ((j < seps.view(-1, 1, 1)) | (j <= i)).float()


def reference_forward(sd, ids, pos, seps, gelu=gelu_tanh, eps=1e-5, scale=None, causal_only=False):
    """GLM's forward from the state dict alone, written from the README's description."""
    h, nh, L = CONFIG["hidden_size"], CONFIG["num_attention_heads"], CONFIG["num_layers"]
    hd = h // nh
    Bn, Tn = ids.shape
    x = (sd["word_embeddings.weight"][ids] + sd["transformer.position_embeddings.weight"][pos[:, 0]]
         + sd["transformer.block_position_embeddings.weight"][pos[:, 1]])
    m = sep_mask(seps * 0 if causal_only else seps, Tn).unsqueeze(1)  # [B, 1, T, T]
    scale = math.sqrt(hd) if scale is None else scale
    for l in range(L):
        p = "transformer.layers.%d." % l
        ln = lambda t, n: F.layer_norm(t, (h,), sd[p + n + ".weight"], sd[p + n + ".bias"], eps)
        a = ln(x, "input_layernorm")
        qkv = a @ sd[p + "attention.query_key_value.weight"].t() + sd[p + "attention.query_key_value.bias"]
        q, k, v = (t.reshape(Bn, Tn, nh, hd).transpose(1, 2) for t in qkv.split(h, dim=-1))
        s = q @ (k.transpose(-1, -2) / scale)
        s = s * m - 65504.0 * (1.0 - m)
        ctx = (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tn, h)
        x = x + ctx @ sd[p + "attention.dense.weight"].t() + sd[p + "attention.dense.bias"]
        a = ln(x, "post_attention_layernorm")
        f = gelu(a @ sd[p + "mlp.dense_h_to_4h.weight"].t() + sd[p + "mlp.dense_h_to_4h.bias"])
        x = x + f @ sd[p + "mlp.dense_4h_to_h.weight"].t() + sd[p + "mlp.dense_4h_to_h.bias"]
    hidden = F.layer_norm(x, (h,), sd["transformer.final_layernorm.weight"],
                          sd["transformer.final_layernorm.bias"], eps)
    return hidden @ sd["word_embeddings.weight"].t(), hidden


# ---------------------------------------------------------------- checks

def check_semantics(model, ids, pos, seps, logits, hidden, ltor):
    """Prints and asserts the forward semantics the README states. Returns report lines."""
    out = []
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    # FlagAI's own mask equals the sep rule.
    assert torch.equal(ltor, sep_mask(seps, T)), "FlagAI's ltor mask is not the sep rule"
    out.append("FlagAI's ltor mask == [j < sep or j <= i] for every sample: yes")
    with torch.no_grad():
        ref, ref_h = reference_forward(sd, ids, pos, seps)
        d_tanh = (ref - logits).abs().max().item()
        d_hidden = (ref_h - hidden).abs().max().item()
        alternatives = {
            "erf GELU": dict(gelu=gelu_erf),
            "LayerNorm eps 1e-12": dict(eps=1e-12),
            "LayerNorm eps 1e-6": dict(eps=1e-6),
            "scores / sqrt(hidden) instead of / sqrt(head_dim)": dict(scale=math.sqrt(CONFIG["hidden_size"])),
            "unscaled scores": dict(scale=1.0),
            "plain causal mask (sep ignored)": dict(causal_only=True),
        }
        excess = {}
        for what, kw in alternatives.items():
            alt = reference_forward(sd, ids, pos, seps, **kw)[0]
            excess[what] = ((alt - logits).abs() - (C_ATOL + C_RTOL * logits.abs())).max().item()
    out.append("independent reference (tanh GELU, eps 1e-5): max |logits diff| %.3g, "
               "max |hidden diff| %.3g" % (d_tanh, d_hidden))
    assert d_tanh < 2e-6 and d_hidden < 2e-6, (d_tanh, d_hidden)
    for what, e in excess.items():
        out.append("a reference with %s misses FlagAI's logits by up to %.3g beyond atol %g + "
                   "rtol %g*|logit|" % (what, e, C_ATOL, C_RTOL))
        assert e > 0, "the golden cannot tell FlagAI from: " + what

    def run(i):
        with torch.no_grad():
            return model(input_ids=i, position_ids=pos, attention_mask=seps)["logits"]

    # A token after sep in sample 2 (sep 4): positions before it keep their logits (context
    # and earlier span tokens do not see it), it and later positions change; other samples
    # are untouched.
    t_after = 8
    i2 = ids.clone()
    i2[2, t_after] = (i2[2, t_after] + 17) % CONFIG["vocab_size"]
    l2 = run(i2)
    before = (l2[2, :t_after] - logits[2, :t_after]).abs().max().item()
    at_after = (l2[2, t_after:] - logits[2, t_after:]).abs().amax(-1)
    others = (l2[:2] - logits[:2]).abs().max().item()
    out.append("sample 2, token %d (after sep 4) changed: max |diff| at positions 0..%d = %g, "
               "min over positions %d..11 of max |diff| = %.3g, other samples %g"
               % (t_after, t_after - 1, before, t_after, at_after.min().item(), others))
    assert before == 0.0 and others == 0.0 and at_after.min().item() > 1e-4

    # A context token (position 3, before sep 4) changed: every position changes, position 0
    # included (the context is bidirectional and the span sees all of it).
    i3 = ids.clone()
    i3[2, 3] = (i3[2, 3] + 17) % CONFIG["vocab_size"]
    l3 = run(i3)
    ctx_min = (l3[2] - logits[2]).abs().amax(-1).min().item()
    out.append("sample 2, context token 3 changed: min over all 12 positions of max |diff| = %.3g"
               % ctx_min)
    assert ctx_min > 1e-4

    # Sample 0 (sep = T): the last token changes position 0's logits (fully bidirectional).
    # Sample 1 (sep 7): the last context token (6) changes position 0, the first span token
    # (7) does not change positions 0..6.
    i4 = ids.clone()
    i4[0, T - 1] = (i4[0, T - 1] + 17) % CONFIG["vocab_size"]
    i4[1, 7] = (i4[1, 7] + 17) % CONFIG["vocab_size"]
    l4 = run(i4)
    d0 = (l4[0, 0] - logits[0, 0]).abs().max().item()
    d1 = (l4[1, :7] - logits[1, :7]).abs().max().item()
    out.append("sample 0 (sep 12), token 11 changed: position 0 max |diff| = %.3g; "
               "sample 1 (sep 7), span token 7 changed: positions 0..6 max |diff| = %g" % (d0, d1))
    assert d0 > 1e-4 and d1 == 0.0
    for line in out:
        print("check:", line)
    return out


# ---------------------------------------------------------------- main run

def generate(flagai_root, out_dir):
    glm_model, base_model, _ = load_flagai(flagai_root)
    os.makedirs(out_dir, exist_ok=True)
    model = build_model(glm_model, base_model)
    init_state = copy.deepcopy(model.state_dict())
    names = [n for n, _ in model.named_parameters()]
    assert names == list(init_state), "named_parameters and state_dict differ"

    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=4)
        f.write("\n")
    meta = versions()
    meta.update({"flagai": "1.8.0", "model": "flagai.model.glm_model.GLMModel",
                 "seed": str(SEED), "param_seed": str(PARAM_SEED)})
    save_file({k: v.clone() for k, v in init_state.items()},
              os.path.join(out_dir, "model.safetensors"), metadata=meta)

    ids, pos, seps, labels = make_batch()

    # FlagAI's ltor mask (the 2nd argument of every GLMBlock) and the final LayerNorm's output.
    seen = {}
    h1 = model.transformer.layers[0].register_forward_pre_hook(
        lambda mod, args: seen.__setitem__("ltor", args[1].detach().clone()))
    h2 = model.transformer.final_layernorm.register_forward_hook(
        lambda mod, args, out: seen.__setitem__("hidden", out.detach().clone()))
    model.train()  # dropout is 0; train mode as in fine-tuning
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, position_ids=pos, attention_mask=seps, labels=labels)
    h1.remove()
    h2.remove()
    logits = out["logits"]
    loss = lm_loss(logits, labels)
    # FlagAI's own loss (F.cross_entropy, default ignore_index -100) is the same number
    assert torch.equal(out["loss"].detach(), loss.detach()), (out["loss"], loss)
    loss.backward()
    ltor = seen["ltor"].squeeze(1)  # [B, 1, T, T] -> [B, T, T]
    hidden = seen["hidden"]

    cloze_pos = torch.tensor(CLOZE_POS, dtype=torch.long)
    cloze_ids = torch.tensor(CLOZE_IDS, dtype=torch.long)
    cloze_scores = logits.detach()[torch.arange(B).view(-1, 1), cloze_pos.view(-1, 1), cloze_ids.view(1, -1)]

    tensors = {
        "input_ids": ids.to(torch.int32),
        "position_ids": pos.to(torch.int32),
        "attention_mask": seps.to(torch.int32),
        "labels": labels.to(torch.int32),
        "ltor_mask": ltor.to(torch.int32),
        "logits": logits.detach().clone(),
        "hidden": hidden,
        "loss": loss.detach().reshape(1).clone(),
        "cloze_pos": cloze_pos.to(torch.int32),
        "cloze_ids": cloze_ids.to(torch.int32),
        "cloze_scores": cloze_scores.clone(),
    }
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().clone()

    checks = check_semantics(model, ids, pos, seps, logits.detach(), hidden, ltor.float())

    opt = make_optimizer(model)
    opt.step()
    after = {"after_step." + n: p.detach().clone() for n, p in model.named_parameters()}

    # Five clipped steps from the same initial weights on the same batch.
    model.load_state_dict(init_state)
    model.zero_grad(set_to_none=True)
    opt = make_optimizer(model)
    losses, norms = [], []
    for _ in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        o = model(input_ids=ids, position_ids=pos, attention_mask=seps)
        l = lm_loss(o["logits"], labels)
        l.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(l.item())
        norms.append(float(gn))
    tensors["losses5"] = torch.tensor(losses, dtype=torch.float32)
    tensors["gradnorm5"] = torch.tensor(norms, dtype=torch.float32)

    meta.update({
        "batch_seed": str(BATCH_SEED),
        "seps": json.dumps(SEPS),
        "loss": "cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=-100), mean over non-ignored",
        "optimizer": "torch.optim.AdamW foreach=False",
        "lr": str(LR), "beta1": str(BETAS[0]), "beta2": str(BETAS[1]), "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY),
        "no_decay": "every *.bias and every *layernorm* parameter",
        "clip_grad_norm": str(CLIP), "train_steps": str(TRAIN_STEPS),
        "layout": "FlagAI GLMModel state_dict names; Linear weights [out, in]",
    })
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(out_dir, "golden.safetensors"), metadata=meta)
    save_file(after, os.path.join(out_dir, "after_step.safetensors"), metadata=meta)
    return init_state, tensors, checks


def write_readme(out_dir, init_state, tensors, checks, flagai_root):
    ids, pos, labels = tensors["input_ids"], tensors["position_ids"], tensors["labels"]
    L = []
    w = L.append
    w("# glm-tiny: FlagAI GLMModel goldens\n")
    w("Written by scripts/golden/gen_glm_golden.py with python %s, torch %s, safetensors %s, "
      "FlagAI 1.8.0 (wheel unpacked at %s, not installed; flagai/ and flagai/model/ are empty "
      "stand-in packages so their __init__ files, which import every model, do not run: "
      "scripts/golden/flagai_wheel.py). float32, CPU, one thread, deterministic algorithms; "
      "safetensors written with sorted headers (a rerun gives the same bytes).\n"
      % (sys.version.split()[0], torch.__version__, safetensors.__version__, flagai_root))
    w("## Model\n")
    w("The real `flagai.model.glm_model.GLMModel` (not a hand-written copy), single-process "
      "layers (ENV_TYPE unset: torch Linear, torch LayerNorm since apex is absent, "
      "VocabParallelEmbedding over the whole vocab). config.json: %s. "
      "Built after torch.manual_seed(%d), then every parameter, in named_parameters order, "
      "redrawn from a generator seeded %d: LayerNorm weights 1 + %g*N(0,1), LayerNorm biases "
      "%g*N(0,1), query_key_value and dense_h_to_4h weights %g*N(0,1) (so that the softmax is "
      "not near uniform and GELU sees |x| ~ 1: a wrong score scale or GELU variant must show "
      "at the C tests' tolerances), everything else (embeddings, other Linear weights, all "
      "Linear biases) %g*N(0,1).\n"
      % (json.dumps(CONFIG), SEED, PARAM_SEED, LN_STD, LN_STD,
         STD_OVERRIDE["attention.query_key_value.weight"], WEIGHT_STD))
    w("| name | shape |\n|---|---|")
    for k, v in init_state.items():
        if ".layers.1." not in k:
            w("| %s | %s |" % (k, list(v.shape)))
    w("| (transformer.layers.1.* the same) | |\n")
    w("## Forward semantics (read from FlagAI's code, then checked by the script)\n")
    w("- Embedding: `x = word_embeddings[ids] + position_embeddings[position_ids[:,0]] + "
      "block_position_embeddings[position_ids[:,1]]` (both position tables have "
      "max_sequence_length + 1 = 33 rows). No embedding LayerNorm, no scaling. "
      "VocabParallelEmbedding returns a zero vector for ids outside [0, vocab) instead of failing.")
    w("- Pre-LN blocks: `x += dense(attn(LN1(x)))`, `x += 4h_to_h(gelu(h_to_4h(LN2(x))))`, then "
      "`final_layernorm`. LayerNorm eps 1e-5 everywhere (GLMStack's default; GLMModel passes none), "
      "biased variance, torch.nn.LayerNorm.")
    w("- GELU is the tanh approximation (flagai/model/layers/activations.py gelu_impl: "
      "`0.5*x*(1 + tanh(0.7978845608028654*x*(1 + 0.044715*x*x)))`), not erf.")
    w("- query_key_value is one Linear [3h, h] + bias; its output is split in three along the "
      "last dim as [Q | K | V] (each h wide), then each viewed [heads, head_dim] head-major. "
      "No per-head q/k/v interleave.")
    w("- Scores (attention_scale 1.0): `q @ (k^T / sqrt(head_dim))` (k is divided before the "
      "matmul). Masking is not additive -10000: `s = s*m + (-65504)*(1 - m)`, i.e. a masked score "
      "becomes exactly -65504 (this is float32; -65504 is fp16's lowest, so exp underflows to 0 "
      "and it equals -inf masking whenever a row has a visible key, which is always: the "
      "diagonal). Softmax over keys, no dropout (0).")
    w("- Mask from `attention_mask` = sep[b] (a [B] tensor; a 1-element tensor means one sep for "
      "the batch, and any other shape is taken as a ready [B,1,T,T] mask): query i sees key j iff "
      "`j < sep[b] or j <= i`. The context 0..sep-1 is bidirectional and does not see the span; "
      "the span sees the whole context and itself causally. golden's `ltor_mask` is FlagAI's "
      "own matrix (captured at layer 0's input).")
    w("- Output (output_predict, parallel_output): `logits = F.linear(final_hidden, "
      "word_embeddings.weight)`: tied to the input embedding, no bias, no extra head. "
      "word_embeddings' gradient therefore sums the input-embedding and output-layer terms.")
    w("- Loss: FlagAI's own `labels=` path is `F.cross_entropy(logits.view(-1,V).float(), "
      "labels.view(-1).long())` (default ignore_index -100, mean over the non-ignored); the "
      "script checks it equals the recorded `loss` exactly.")
    w("- Attention with key length = query length only (max_memory_length 0, no mems).\n")
    w("Checks the script ran (printed when it runs):\n")
    for c in checks:
        w("- " + c)
    w("")
    w("## Batch (B=3, T=12)\n")
    w("Toy ids: pad %d, [CLS] %d, [eos] %d (unused), [MASK] %d, [sop] %d, [eop] %d, words %d..127 "
      "(random, batch seed %d). Sample b: context `[CLS] w .. [MASK] .. w` of length sep[b] = %s, "
      "[MASK] at %s, positions 0..sep-1 with block position 0; then the span `[sop] y1 .. y(n-1)` "
      "with position = the [MASK]'s position and block positions 1..n, labelled `y1 .. y(n-1) "
      "[eop]` (GLM blank infilling); then pads (position 0, block 0, label -100). Sample 0 is "
      "all context (sep = T, no span: the single-token cloze layout) with its one label, %d, at "
      "the [MASK]. Labels are -100 on every context position otherwise.\n"
      % (PAD, CLS, EOS, MASK, SOP, EOP, FIRST_WORD, BATCH_SEED, SEPS, MASK_POS, CLOZE_IDS[0]))
    w("```")
    for b in range(B):
        w("sample %d  ids      %s" % (b, ids[b].tolist()))
        w("          position %s" % pos[b, 0].tolist())
        w("          block    %s" % pos[b, 1].tolist())
        w("          labels   %s" % labels[b].tolist())
    w("```\n")
    w("## Files\n")
    w("| file | what |\n|---|---|")
    w("| config.json | GLMModel's 19 config fields |")
    w("| model.safetensors | the initial parameters under FlagAI's state_dict names (header "
      "sorted by name); Linear weights [out, in] |")
    w("| golden.safetensors | the tensors below |")
    w("| after_step.safetensors | `after_step.<name>`: every parameter after one AdamW step "
      "(lr %g, betas %s, eps %g, weight decay %g, foreach=False) from the initial weights with "
      "the gradients below; no decay on *.bias and *layernorm* parameters (embeddings decay) |\n"
      % (LR, BETAS, EPS, WEIGHT_DECAY))
    about = {
        "input_ids": "token ids (stored int32; fed to FlagAI as int64)",
        "position_ids": "[B, 2, T]: row 0 positions, row 1 block positions (int32)",
        "attention_mask": "[B] sep per sample, %s (int32; what GLMModel takes as attention_mask)" % SEPS,
        "labels": "[B, T], -100 where no loss (int32)",
        "ltor_mask": "[B, T, T] FlagAI's mask, 1 = query row may attend key column (int32)",
        "logits": "[B, T, V] GLMModel(...)['logits'], train mode, dropout 0",
        "hidden": "[B, T, h] final_layernorm's output (what multiplies word_embeddings^T)",
        "loss": "[1] cross_entropy(logits.view(-1,V), labels.view(-1), ignore_index=-100)",
        "cloze_pos": "[B] %s: the position scored per sample (0 and 2: their [MASK]; 1: its [sop])" % CLOZE_POS,
        "cloze_ids": "[K=3] %s, the verbalizer ids" % CLOZE_IDS,
        "cloze_scores": "[B, K] logits[b, cloze_pos[b], cloze_ids[k]] (raw logits, no softmax)",
        "losses5": "[5] loss before each of 5 AdamW steps with clip_grad_norm_(all params, %g) "
                   "from the initial weights on this batch" % CLIP,
        "gradnorm5": "[5] the total grad norm clip_grad_norm_ returned at each of those steps (before clipping)",
    }
    w("| name | dtype, shape | meaning |\n|---|---|---|")
    for k, v in tensors.items():
        if k.startswith("grad."):
            continue
        w("| %s | %s %s | %s |" % (k, str(v.dtype).replace("torch.", ""), list(v.shape), about[k]))
    w("| grad.<name> | float32, as the parameter | d loss / d parameter for every parameter |\n")
    w("Loss values: loss %.6f; losses5 %s; gradnorm5 %s.\n"
      % (tensors["loss"].item(), ["%.6f" % x for x in tensors["losses5"].tolist()],
         ["%.6f" % x for x in tensors["gradnorm5"].tolist()]))
    w("FlagAI note, not used here: GLMForSingleTokenCloze scores `outputs[b, attention_mask[b]]`, "
      "i.e. it reads the logits at the sep index itself, then `[:, target_ids]`.\n")
    w("## Sizes (bytes)\n")
    for fn in sorted(os.listdir(out_dir)):
        if fn != "README.md":
            w("- %s: %d" % (fn, os.path.getsize(os.path.join(out_dir, fn))))
    w("")
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("flagai", help="folder holding FlagAI 1.8's unpacked wheel (the one with flagai/)")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "glm-tiny"))
    ap.add_argument("--quiet", action="store_true", help="skip the per-tensor summary")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    init_state, tensors, checks = generate(os.path.abspath(a.flagai), a.out)
    write_readme(a.out, init_state, tensors, checks, a.flagai)
    total = 0
    for fn in sorted(os.listdir(a.out)):
        p = os.path.join(a.out, fn)
        os.chmod(p, 0o644)
        total += os.path.getsize(p)
        if os.path.getsize(p) >= 1 << 20:
            sys.exit("error: %s is over 1 MiB" % p)
        if not a.quiet and fn.endswith(".safetensors"):
            summarize(p)
    print("wrote %s: %d bytes" % (a.out, total))


if __name__ == "__main__":
    main()
