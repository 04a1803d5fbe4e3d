#!/usr/bin/env python3
"""50 training steps of a tiny Llama, ours against a PyTorch loop over transformers' model with
the same data order and hyper-parameters; compares the per-step loss curves.

usage: hf_train_parity.py [--masked] [--packed] BUILD_DIR [cpu|cuda|all]      (default: all)

--masked: the text as an MTCTOKS1 version 2 shard with a target mask (the bytes of every
third line are context only), 20 steps; the PyTorch loop gives those positions labels = -100
and divides each step's summed loss by the step's target count over all micro-batches (as
transformers' num_items_in_batch). Its first step must agree within 1e-5 on cpu.
--packed: data.pack = "documents" with data.eot = 10: each line of the text (its newline
included) is a document; the PyTorch loop runs transformers on every document of a window
alone (positions from 0) and does not predict a document's first token from the one before
(the newline's target is -100). 20 steps; first step within 1e-5 on cpu. Both flags together:
a masked, packed SFT-style run.

The same model starts both runs: LlamaForCausalLM (hidden 64, 2 layers, 4 heads, 2 kv heads,
ffn 160, vocab 256, untied), transformers' own initialization rounded to bf16-representable
values, saved with save_pretrained and loaded by ours through model_dir. Data: the repository's
data/tinyshakespeare.txt, one token per byte; data.val_path names the same file, so that all of
it trains (data.c's n_train = n), and the windows of every step are data.c's, mirrored here
(splitmix64 of seed, split, step, micro-batch, row; inputs tokens[o, o + T), targets one further).

The PyTorch loop reproduces our optimizer step, not a different recipe:
  - the forward and backward run on the fp32 master weights rounded to bf16 (what our ranks
    stream: the master rounded to bf16, kept in fp32 on the CPU backend), the update on the masters;
  - the loss is the mean over micro_batches x micro_batch x seq_len tokens, gradients of it
    accumulated over the micro-batches;
  - torch.nn.utils.clip_grad_norm_(max_norm = optimizer.clip) over all parameters, then
    torch.optim.AdamW (one parameter group: weight decay on every tensor, norms and embedding
    included, as runtime/optimizer/optimizer.c applies it), betas, eps, weight_decay as configured;
  - the learning rate of step s (0-based) is runtime/model/schedule.c's lr_at_step: linear warm-up
    lr * (s + 1) / warmup_steps, then cosine from lr to min_lr over steps - warmup_steps.
Pass: max relative difference of the 50 losses below 1e-3 on cpu, 3e-2 on cuda (bf16 compute).
Runs in well under 2 minutes on 16 cores. Exit 0 / 1 (a FAIL) / 77 (no torch, or no backend).
"""
import math
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import mtparity  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)
transformers.utils.logging.disable_progress_bar()
MASKED, PACKED = "--masked" in sys.argv, "--packed" in sys.argv
for flag in ("--masked", "--packed"):
    if flag in sys.argv:
        sys.argv.remove(flag)
EOT = 10  # --packed: the newline ends a document

DIM, LAYERS, HEADS, KV, FFN, VOCAB = 64, 2, 4, 2, 160, 256
SEQ, MICRO, MICROS, SEED = 64, 4, 2, 1337
STEPS, WARMUP, LR, MIN_LR = (20 if MASKED or PACKED else 50), 5, 3e-3, 3e-4
BETA1, BETA2, EPS, WD, CLIP = 0.9, 0.95, 1e-8, 0.1, 1.0
TOL = {"cpu": 1e-3, "cuda": 3e-2}
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(SRC, "data", "tinyshakespeare.txt")

def batch(tokens, step, micro, mask=None):
    """runtime/io/data.c's dataset_batch for the training split [0, n); with a mask, the
    context-only targets are -100 (Hugging Face's ignore index)."""
    xs, ys = mtparity.batch(tokens, SEED, step, micro, MICRO, SEQ, len(tokens))
    if mask is not None:
        ms = mtparity.batch(mask, SEED, step, micro, MICRO, SEQ, len(tokens))[1]
        ys = [[y if m else -100 for y, m in zip(yr, mr)] for yr, mr in zip(ys, ms)]
    if PACKED:  # no document predicted from the one before: the eot's target is dropped
        ys = [[-100 if x == EOT else y for x, y in zip(xr, yr)] for xr, yr in zip(xs, ys)]
    return torch.tensor(xs), torch.tensor(ys)


def documents(row):
    """[start, end) of each document of a window row: each ends after an EOT, the last at T."""
    spans, start = [], 0
    for t, x in enumerate(row.tolist()):
        if x == EOT:
            spans.append((start, t + 1))
            start = t + 1
    if start < len(row):
        spans.append((start, len(row)))
    return spans


def text_mask(tokens):
    """Every third line's bytes (its newline included) are context only."""
    mask, line = [], 0
    for t in tokens:
        mask.append(0 if line % 3 == 2 else 1)
        line += t == 10
    return mask


def write_masked_shard(path, tokens, mask):
    """MTCTOKS1 version 2 (docs/data-format.md): header, uint16 tokens, the target mask."""
    head = b"MTCTOKS1" + struct.pack("<IIQI", 2, 2, len(tokens), 1)
    bits = bytearray((len(tokens) + 7) // 8)
    for i, m in enumerate(mask):
        bits[i >> 3] |= m << (i & 7)
    with open(path, "wb") as f:
        f.write(head.ljust(256, b"\0") + struct.pack(f"<{len(tokens)}H", *tokens) + bytes(bits))


def lr_at_step(s):  # runtime/model/schedule.c
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    decay = STEPS - WARMUP
    if decay <= 0:
        return LR
    progress = min((s - WARMUP) / decay, 1.0)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


def make_model():
    cfg = LlamaConfig(hidden_size=DIM, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV, vocab_size=VOCAB,
                      max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.bfloat16().float())
    return model


def torch_curve(model, tokens, mask=None):
    """Our step, in PyTorch: bf16-rounded compute weights, fp32 masters, clip, AdamW."""
    params = list(model.parameters())
    master = [p.detach().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD,
                            foreach=False)
    n = MICROS * MICRO * SEQ
    losses = []
    for s in range(STEPS):
        with torch.no_grad():
            for p, m in zip(params, master):
                p.copy_(m.bfloat16().float())
        model.zero_grad(set_to_none=True)
        total = 0.0
        if mask is not None or PACKED:  # the step's targets, every micro-batch's
            n = sum(int((batch(tokens, s, m, mask)[1] >= 0).sum()) for m in range(MICROS))
        for micro in range(MICROS):
            x, y = batch(tokens, s, micro, mask)
            # packed: every document alone, positions from 0; else the whole window
            pieces = ([(x[r:r + 1, a:b], y[r:r + 1, a:b]) for r in range(MICRO)
                       for a, b in documents(x[r])] if PACKED else [(x, y)])
            for xp, yp in pieces:
                logits = model(input_ids=xp).logits.float()
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), yp.reshape(-1), reduction="sum",
                                       ignore_index=-100)
                total += loss.item()
                (loss / n).backward()
        losses.append(total / n)
        for p, m in zip(params, master):
            m.grad = p.grad.detach().clone()
        torch.nn.utils.clip_grad_norm_(master, CLIP)
        for group in opt.param_groups:
            group["lr"] = lr_at_step(s)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def our_curve(build, work, backend):
    """mtrun -np 3 for STEPS steps: the per-step losses, or None when the backend is missing."""
    cfg = os.path.join(work, f"{backend}.cfg")
    pack = f'pack = "documents"; eot = {EOT}; ' if PACKED else ""
    data = (f'data = {{ path = "{TEXT}"; val_path = "{TEXT}"; {pack}}};\n' if not MASKED else
            f'data = {{ path = "masked.bin"; val_path = "masked.bin"; format = "tokens"; {pack}}};\n')
    with open(cfg, "w") as f:
        f.write(f'model_dir = "model";\n' + data +
                f"batch = {{ micro_batch = {MICRO}; micro_batches = {MICROS}; seq_len = {SEQ}; }};\n"
                f"optimizer = {{ lr = {LR!r}; min_lr = {MIN_LR!r}; warmup_steps = {WARMUP}; "
                f"beta1 = {BETA1!r}; beta2 = {BETA2!r}; eps = {EPS!r}; weight_decay = {WD!r}; "
                f"clip = {CLIP!r}; }};\n"
                f'steps = {STEPS};\nseed = {SEED};\nbackend = "{backend}";\n'
                "checkpoint = { interval = 0; };\n")
    records, why = mtparity.run_mtrun(build, cfg, os.path.join(work, f"run-{backend}"))
    if records is None:
        return None
    losses = {r["step"]: r["loss"] for r in records if "loss" in r and "step" in r}
    return [losses[s] for s in range(1, STEPS + 1)]


def main():
    build, backends = mtparity.parse_args(__doc__, torch.cuda.is_available())
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    tokens = list(open(TEXT, "rb").read())
    failed = ran = 0
    with tempfile.TemporaryDirectory(prefix="mt-train-parity-") as work:
        model = make_model()
        try:
            model.save_pretrained(os.path.join(work, "model"), safe_serialization=True)
        except TypeError:  # transformers without the argument: safetensors always
            model.save_pretrained(os.path.join(work, "model"))
        mask = None
        if MASKED:
            mask = text_mask(tokens)
            write_masked_shard(os.path.join(work, "masked.bin"), tokens, mask)
        ref = torch_curve(model, tokens, mask)
        for backend in backends:
            ours = our_curve(build, work, backend)
            if ours is None:
                print(f"SKIP: {backend}: backend not available")
                continue
            ran += 1
            rel = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
            print(f"step  ours ({backend})        pytorch               relative")
            for s, (a, b, r) in enumerate(zip(ours, ref, rel)):
                print(f"{s + 1:4d}  {a:.15f}  {b:.15f}  {r:.2e}")
            worst = max(rel)
            ok = worst < TOL[backend] and (not (MASKED or PACKED) or backend != "cpu" or
                                           rel[0] < 1e-5)
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'}: {backend}{' masked' if MASKED else ''}"
                  f"{' packed' if PACKED else ''}: "
                  f"first step {rel[0]:.2e}, {STEPS} steps, loss {ours[0]:.4f} -> "
                  f"{ours[-1]:.4f} (pytorch {ref[0]:.4f} -> {ref[-1]:.4f}), max relative "
                  f"difference {worst:.2e} (< {TOL[backend]:g})", flush=True)
    if failed:
        sys.exit(1)
    if ran == 0:
        sys.exit(77)


if __name__ == "__main__":
    main()
