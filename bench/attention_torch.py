#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, causal, forward and backward, on the shapes of
bench/attention_bench.c, for each SDPA backend that takes them (flash, cuDNN). Same FLOP
count: causal-counted, the backward as 2.5 forwards.

    usage: attention_torch.py [--T 2048,8192,...] [--hd 64,100,128]
"""
import argparse
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def shape_for(T, hd):
    B = 1 if T >= 16384 else 16384 // T
    H = 8 if T >= 131072 else 32
    KV = H // 8 if hd == 64 else H
    return B, T, H, KV, hd


def time_ms(fn):
    fn()
    torch.cuda.synchronize()
    total, n = 0.0, 0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while n < 2 or total < 300.0:
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        total += e0.elapsed_time(e1)
        n += 1
    return total / n


def bench(backend, name, B, T, H, KV, hd):
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: (torch.rand(B, h, T, hd, device="cuda", generator=g, dtype=torch.bfloat16) * 2 - 1)
    q = mk(H).requires_grad_()
    # GQA as repeated kv heads: the backends' own GQA support varies by version.
    k = mk(KV).repeat_interleave(H // KV, dim=1).requires_grad_()
    v = mk(KV).repeat_interleave(H // KV, dim=1).requires_grad_()
    dout = mk(H)
    flops = 4.0 * B * H * T * T * hd / 2.0
    with sdpa_kernel([backend]):
        def fwd():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        def bwd():
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        f, b = time_ms(fwd), time_ms(bwd)
    print(f"ATTN path={name:<5} hd={hd:3d} T={T:6d} B={B:2d} H={H:2d} KV={KV:2d}  forward {f:9.3f} ms "
          f"{flops / f / 1e9:6.1f} TFLOP/s  backward {b:9.3f} ms {2.5 * flops / b / 1e9:6.1f} TFLOP/s",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="2048,8192,32768,131072,524288")
    ap.add_argument("--hd", default="64,100,128")
    a = ap.parse_args()
    print(f"# torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    for hd in map(int, a.hd.split(",")):
        for T in map(int, a.T.split(",")):
            for backend, name in ((SDPBackend.FLASH_ATTENTION, "flash"),
                                  (SDPBackend.CUDNN_ATTENTION, "cudnn")):
                try:
                    bench(backend, name, *shape_for(T, hd))
                except Exception as e:  # a backend that does not take the shape says so
                    print(f"ATTN path={name:<5} hd={hd:3d} T={T:6d} unsupported: "
                          f"{str(e).splitlines()[0][:100]}", flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
