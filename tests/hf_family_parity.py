#!/usr/bin/env python3
"""First-step loss of our trainer against transformers' on the same batch, one tiny model per
Hugging Face family: LlamaForCausalLM with Llama 3.1's rope_scaling, MistralForCausalLM (a window
longer than the sequence, and one of 16 keys of 64) and Qwen2ForCausalLM (q/k/v biases, tied
embeddings; and a window of 16 on layer 1 from max_window_layers).

usage: hf_family_parity.py BUILD_DIR [cpu|cuda|all]      (default: all)

For each family: a random fp32 model (hidden 64, 2 layers, 4 heads, 2 kv heads, vocab 256) with
weights large enough that RoPE and the biases move the loss, rounded to bf16-representable values
(our ranks stream bf16 weights, also to the CPU backend); save_pretrained (safetensors) into a
temporary folder; a token file (MTCTOKS1); a train.cfg with model_dir, steps = 1; then
build/bin/mtrun -np 3 on each backend. The loss of step 1 (metrics.jsonl, computed before any
update) must equal transformers' mean cross-entropy on the same batch: the windows data.c draws
(splitmix64 of seed, split, step, micro-batch and row; inputs tokens[o, o + T), targets one
further on), mirrored below. Tolerance: 1e-4 relative on cpu (fp32), 2e-2 on cuda (bf16).
Also: our RoPE table (build/bin/test_hf rope) against the model's inv_freq buffer, bitwise; a
check that the test can fail (without rope_scaling or without the biases, transformers' loss
moves by far more than the tolerance); and the cpu run's export_dir loaded back by transformers:
the same class, every tensor ours and none missing, the same RoPE table.

Prints one PASS/FAIL/SKIP line per check; writes only under a temporary folder. Exit 0 when
nothing failed, 1 otherwise, 77 (skipped) without torch/transformers or without the backend.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import mtparity

try:
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                              MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)
transformers.utils.logging.disable_progress_bar()

DIM, LAYERS, HEADS, KV, FFN, VOCAB = 64, 2, 4, 2, 160, 256
SEQ, MICRO, MICROS, SEED, NTOK = 64, 2, 2, 1337, 4096
TOL = {"cpu": 1e-4, "cuda": 2e-2}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}  # head dim 16: all three bands are used
COMMON = dict(hidden_size=DIM, intermediate_size=FFN, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, num_key_value_heads=KV, vocab_size=VOCAB,
              max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
              hidden_act="silu", attention_dropout=0.0)
FAMILIES = [  # name, config class, model class, extra config
    ("llama-rope3", LlamaConfig, LlamaForCausalLM,
     dict(rope_scaling=LLAMA3, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)),
    ("mistral", MistralConfig, MistralForCausalLM,
     dict(sliding_window=4096, tie_word_embeddings=False)),
    ("mistral-window", MistralConfig, MistralForCausalLM,  # every layer sees 16 keys of 64
     dict(sliding_window=16, tie_word_embeddings=False)),
    ("qwen2", Qwen2Config, Qwen2ForCausalLM,
     dict(tie_word_embeddings=True, use_sliding_window=False)),
    ("qwen2-window", Qwen2Config, Qwen2ForCausalLM,  # layer 1 of 2 sees 16 keys of 64
     dict(tie_word_embeddings=True, use_sliding_window=True, sliding_window=16,
          max_window_layers=1)),
]
failures = 0


def report(status, msg):
    global failures
    failures += status == "FAIL"
    print(f"{status}: {msg}", flush=True)


# ---- data.c's windows, mirrored ----

def batch(tokens, step, micro, rows, hi, split=0, lo=0):
    """dataset_batch: row r's window starts at lo + key % (hi - lo - T)."""
    xs, ys = mtparity.batch(tokens, SEED, step, micro, rows, SEQ, hi, split, lo)
    return torch.tensor(xs), torch.tensor(ys)


def write_tokens(path, tokens):
    """Our MTCTOKS1 shard: magic, version 1, 2 bytes per token, count; 256-byte header."""
    head = b"MTCTOKS1" + struct.pack("<IIQ", 1, 2, len(tokens))
    with open(path, "wb") as f:
        f.write(head + bytes(256 - len(head)) + struct.pack(f"<{len(tokens)}H", *tokens))


# ---- transformers' side ----

def make_model(cfg_cls, model_cls, extra):
    cfg = cfg_cls(**COMMON, **extra)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:  # Qwen2's biases: transformers starts them at zero
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
            p.copy_(p.bfloat16().float())  # what our ranks stream
    return model


@torch.no_grad()
def hf_loss(model, tokens):
    """Mean cross-entropy over the step's micro-batches, summed in double like ours."""
    total = 0.0
    for m in range(MICROS):
        x, y = batch(tokens, 0, m, MICRO, len(tokens))
        logits = model(input_ids=x).logits.float()
        total += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum").item()
    return total / (MICROS * MICRO * SEQ)


def plain_inv_freq(hd, theta):  # transformers' _compute_default_rope_parameters
    return 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))


def inv_freq_buffers(model):
    """RoPE's tables: one for the model (transformers >= 4.45), or one per attention layer."""
    return [b for n, b in model.named_buffers() if n.endswith("rotary_emb.inv_freq")]


def bits(values):
    return list(struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values)))


@torch.no_grad()
def sensitivity(name, model, tokens, loss):
    """What a missing feature would do to the loss: it must show far above the tolerance."""
    if name == "llama-rope3":
        tables = inv_freq_buffers(model)
        saved = [t.clone() for t in tables]
        for t in tables:
            t.copy_(plain_inv_freq(DIM // HEADS, COMMON["rope_theta"]))
        other = hf_loss(model, tokens)
        for t, s in zip(tables, saved):
            t.copy_(s)
        what = "without rope_scaling"
    elif name == "qwen2":
        biases = [p for n, p in model.named_parameters() if n.endswith(".bias")]
        saved = [b.clone() for b in biases]
        for b in biases:
            b.zero_()
        other = hf_loss(model, tokens)
        for b, s in zip(biases, saved):
            b.copy_(s)
        what = "without the q/k/v biases"
    else:
        return
    rel = abs(other - loss) / abs(loss)
    report("PASS" if rel > 20 * TOL["cpu"] else "FAIL",
           f"{name}: transformers' loss {what} moves by {rel:.2e} (> {20 * TOL['cpu']:g}: "
           f"the comparison can fail)")


# ---- our side ----

def our_inv_freq(test_hf, model_dir):
    out = subprocess.run([test_hf, "rope", model_dir], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"test_hf rope: {out.stderr.strip()}")
    return [int(line, 16) for line in out.stdout.split()]


def check_inv_freq(name, test_hf, work, model):
    """Bitwise, when the plain tables (powf against torch's pow) agree; else to 2 ulp."""
    model_dir = os.path.join(work, "model")
    theirs = bits(inv_freq_buffers(model)[0].tolist())
    ours = our_inv_freq(test_hf, model_dir)
    plain_dir = os.path.join(work, "plain")  # the same folder without rope_scaling
    os.makedirs(plain_dir)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg.pop("rope_scaling", None)
    if isinstance(cfg.get("rope_parameters"), dict):  # transformers 5
        cfg["rope_parameters"] = {"rope_type": "default",
                                  "rope_theta": cfg["rope_parameters"].get("rope_theta", 10000.0)}
    json.dump(cfg, open(os.path.join(plain_dir, "config.json"), "w"))
    for f in os.listdir(model_dir):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.symlink(os.path.join(model_dir, f), os.path.join(plain_dir, f))
    plain_ulp = max(abs(a - b) for a, b in zip(our_inv_freq(test_hf, plain_dir),
                                               bits(plain_inv_freq(DIM // HEADS,
                                                                   COMMON["rope_theta"]).tolist())))
    ulp = max(abs(a - b) for a, b in zip(ours, theirs)) if len(ours) == len(theirs) else 1 << 30
    limit = 0 if plain_ulp == 0 else 2
    report("PASS" if ulp <= limit else "FAIL",
           f"{name}: RoPE inv_freq {'bitwise equal' if ulp == 0 else f'{ulp} ulp'} vs transformers' "
           f"(plain tables {plain_ulp} ulp apart; limit {limit})")


def check_export(name, model, export):
    """transformers reads our export_dir as the model it came from: class (a Mistral keeps its
    window), tensors, RoPE table."""
    back, info = AutoModelForCausalLM.from_pretrained(export, output_loading_info=True)
    odd = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
    same_rope = bits(inv_freq_buffers(back)[0].tolist()) == bits(inv_freq_buffers(model)[0].tolist())
    want = type(model)
    window = getattr(back.config, "sliding_window", None) == getattr(model.config, "sliding_window", None)
    ok = type(back) is want and not odd and same_rope and window
    report("PASS" if ok else "FAIL",
           f"{name}: transformers loads our export as {type(back).__name__}"
           f"{', '.join(f' {k} {info[k]}' for k in odd)}, sliding_window "
           f"{getattr(back.config, 'sliding_window', None)}, RoPE table "
           f"{'the same' if same_rope else 'DIFFERENT'}")


def run_ours(build, work, backend):
    """mtrun -np 3 for one step; the loss of step 1, or a SKIP reason. The cpu run exports."""
    cfg = os.path.join(work, f"{backend}.cfg")
    with open(cfg, "w") as f:
        if backend == "cpu":
            f.write('export_dir = "export-cpu";\n')
        f.write('model_dir = "model";\n'
                # val_path: all of tokens.tok trains (data.c's n_train = n), as mirrored above
                'data = { path = "tokens.tok"; format = "tokens"; val_path = "tokens.tok"; };\n'
                f"batch = {{ micro_batch = {MICRO}; micro_batches = {MICROS}; seq_len = {SEQ}; }};\n"
                "optimizer = { lr = 1e-3; };\n"
                f'steps = 1;\nseed = {SEED};\nbackend = "{backend}";\n'
                "checkpoint = { interval = 0; };\n")
    records, why = mtparity.run_mtrun(build, cfg, os.path.join(work, f"run-{backend}"))
    if records is None:
        return None, why
    for rec in records:
        if rec.get("step") == 1 and "loss" in rec:
            return rec["loss"], None
    raise RuntimeError("no step-1 loss in metrics.jsonl")


def main():
    build, backends = mtparity.parse_args(__doc__, torch.cuda.is_available())
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    rng = random.Random(5)
    tokens = [rng.randrange(VOCAB) for _ in range(NTOK)]
    ran = 0
    for name, cfg_cls, model_cls, extra in FAMILIES:
        with tempfile.TemporaryDirectory(prefix=f"mt-parity-{name}-") as work:
            model = make_model(cfg_cls, model_cls, extra)
            try:
                model.save_pretrained(os.path.join(work, "model"), safe_serialization=True)
            except TypeError:  # transformers without the argument: safetensors always
                model.save_pretrained(os.path.join(work, "model"))
            write_tokens(os.path.join(work, "tokens.tok"), tokens)
            loss = hf_loss(model, tokens)
            sensitivity(name, model, tokens, loss)
            check_inv_freq(name, os.path.join(build, "bin", "test_hf"), work, model)
            for backend in backends:
                ours, why = run_ours(build, work, backend)
                if why:
                    print(f"SKIP: {name}/{backend}: {why}", flush=True)
                    continue
                ran += 1
                if backend == "cpu":
                    check_export(name, model, os.path.join(work, "export-cpu"))
                rel = abs(ours - loss) / abs(loss)
                report("PASS" if rel < TOL[backend] else "FAIL",
                       f"{name}/{backend}: loss {ours:.7f}, transformers {loss:.7f}: relative "
                       f"{rel:.2e} (< {TOL[backend]:g})")
    print(f"{failures} failed" if failures else "all passed")
    if failures:
        sys.exit(1)
    if ran == 0:
        sys.exit(77)


if __name__ == "__main__":
    main()
