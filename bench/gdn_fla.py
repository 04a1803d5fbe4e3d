#!/usr/bin/env python3
"""flash-linear-attention's chunked gated delta rule, timed on the shapes test_gdn_cuda --bench
times ours at, so that the two stand side by side in one call on one card.

  python3 bench/gdn_fla.py --T 8192,32768 --H 32,64 --HK 16 --dk 128 --dv 128 [--B 1]

Inputs as the Qwen3.5 layer hands them over: q and k L2-normalised (bf16, [B, T, HK, dk]), v bf16
[B, T, H, dv], g = log-decay fp32 [B, T, H] (negative), beta bf16 in (0, 1). GVA (H > HK) is
FLA's own (it repeats no tensor). Forward alone, then forward + backward; the backward is their
difference. Best of 5 after 3 warm-ups (Triton autotunes on the first calls). Then, with --kernels,
each of FLA's kernels' time in one more forward + backward (torch.profiler): where its time goes
beside test_gdn_cuda's shares of ours."""
import argparse

import torch


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--B", type=int, default=1, help="rows")
    p.add_argument("--T", default="8192,32768")
    p.add_argument("--H", default="32,64", help="value heads, a list")
    p.add_argument("--HK", type=int, default=16)
    p.add_argument("--dk", type=int, default=128)
    p.add_argument("--dv", type=int, default=128)
    p.add_argument("--kernels", action="store_true", help="each kernel's time in one fwd + bwd")
    return p.parse_args()


def timed(fn, reps=5, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b))
    return best


def kernel_times(fn, top=14):
    """Each CUDA kernel's time (us) in one call of fn, the costliest first."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.device_time_total, e.count, e.key) for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(r[0] for r in rows) or 1.0
    for us, n, name in sorted(rows, reverse=True)[:top]:
        print(f"  {us:9.1f} us {100 * us / total:5.1f}% x{n:<3d} {name[:90]}")


def one(B, T, H, HK, dk, dv, kernels):
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # FLA refuses its gated backward on Hopper with Triton 3.4-3.7.0 (its issue #640: wrong
    # results, which a timing does not read); the device's Triton is 3.6 and a newer Triton or
    # tilelang exceeds what a call may carry. The kernels timed are the ones FLA runs on a
    # newer Triton.
    chunk_o.TRITON_ABOVE_3_7_1 = True

    dev = torch.device("cuda")
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(B, T, HK, dk, device=dev), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(B, T, HK, dk, device=dev), dim=-1).bfloat16()
    v = torch.randn(B, T, H, dv, device=dev).bfloat16()
    g = (-0.05 * (torch.rand(B, T, H, device=dev) * 2)).float()
    beta = (0.1 + 0.8 * torch.rand(B, T, H, device=dev)).bfloat16()
    leaves = [t.requires_grad_() for t in (q, k, v, g, beta)]
    dout = torch.randn(B, T, H, dv, device=dev).bfloat16()
    scale = dk**-0.5

    def fwd():
        with torch.no_grad():
            return chunk_gated_delta_rule(q, k, v, g, beta, scale=scale)[0]

    def fwd_bwd():
        o = chunk_gated_delta_rule(q, k, v, g, beta, scale=scale)[0]
        torch.autograd.backward(o, dout)
        for t in leaves:
            t.grad = None

    f = timed(fwd)
    fb = timed(fwd_bwd)
    print(f"FLA gated delta B={B} T={T} H={H} HK={HK} dk={dk} dv={dv}: forward {f:.3f} ms, "
          f"backward {fb - f:.3f} ms, fwd+bwd {B * T / (fb * 1e-3):.0f} tokens/s", flush=True)
    if kernels:
        kernel_times(fwd_bwd)


def main():
    a = parse()
    for H in (int(x) for x in a.H.split(",")):
        for T in (int(x) for x in a.T.split(",")):
            one(a.B, T, H, a.HK, a.dk, a.dv, a.kernels)


if __name__ == "__main__":
    main()
