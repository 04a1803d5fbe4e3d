#!/usr/bin/env python3
"""The PyTorch peer, to run on the same machine as our bench (bench/device_run.sh torch-NAME,
which adds --checkpointing but for 1b): transformers' LlamaForCausalLM with everything on the
GPU (fp32 master weights, bf16 autocast, SDPA attention, fused AdamW), on the bench configs'
shapes (micro-batch 8 x seq 2048, 4 micro-batches per step, synthetic tokens). TFLOP/s by the
same formula as ours: tokens/s x (6 N + 12 layers dim seq).

usage: bench/torch_baseline.py NAME [--steps 6] [--checkpointing]     NAME: 1b | 3b | 7b
"""
import argparse
import statistics
import sys
import time

SHAPES = {  # dim, ffn, layers, heads, kv heads (vocab 32000), as bench/configs/bench-*.cfg
    "1b": (2048, 5632, 22, 32, 4),
    "3b": (3200, 8640, 26, 32, 32),
    "7b": (4096, 11008, 32, 32, 32),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=SHAPES)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--checkpointing", action="store_true")
    a = ap.parse_args()
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("SKIPPED: no torch/transformers")
        sys.exit(77)
    dim, ffn, layers, heads, kv = SHAPES[a.name]
    B, T, M, V = 8, 2048, 4, 32000
    cfg = LlamaConfig(hidden_size=dim, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=V,
                      max_position_embeddings=T, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).cuda()
    if a.checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    N = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    flops_per_token = 6 * N + 12 * layers * dim * T
    times = []
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for m in range(M):
            ids = torch.randint(0, V, (B, T), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss / M
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        times.append(dt)
        tok_s = B * T * M / dt
        print(f"step {step + 1}: {dt:.3f} s {tok_s:.0f} tok/s {tok_s * flops_per_token / 1e12:.1f} TFLOP/s "
              f"loss {loss.item() * M:.4f}", flush=True)
    dt = statistics.median(times[2:] or times)
    tok_s = B * T * M / dt
    print(f"TORCH {a.name}: params {N} checkpointing {int(a.checkpointing)} median step {dt:.3f} s "
          f"tokens/s {tok_s:.0f} TFLOP/s {tok_s * flops_per_token / 1e12:.1f} "
          f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB "
          f"torch {torch.__version__}")


main()
