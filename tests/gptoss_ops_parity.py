#!/usr/bin/env python3
"""gpt-oss's leaf functions against transformers, on the inputs build/bin/gptoss_ops_dump writes.

usage: gptoss_ops_parity.py BUILD_DIR

- YaRN: rope_yarn_inv_freq's table for gpt-oss-120b (head dim 64, theta 150000, factor 32,
  original 4096, beta 32 / 1), truncate off (its config.json) and on, against the inv_freq and
  attention factor of transformers' ROPE_INIT_FUNCTIONS["yarn"] on a GptOssConfig: the factor
  bitwise, the table within 3e-7 relative (torch's CPU pow, vectorized, is 1 ulp off libm's
  correctly rounded powf on some entries: 2 of gpt-oss-120b's 32 with torch 2.11).
- The clamped SwiGLU: swiglu_clamped_forward / _backward on a grid over [-10, 10] (with +-7 and
  their neighbouring floats) against GptOssExperts._apply_gate on the interleaved gate_up and its
  autograd, fp32: within 1e-6 relative, and the gradient exactly 0 in the same places.
- MXFP4: every byte under every scale against convert_moe_packed_tensors, in bf16 (its default)
  and fp32, on the CPU and on the GPU when there is one: bitwise, inf included (scale 255, E8M0's
  NaN, only from torch 2.11 on, whose ldexp is exact; older torch gave inf/NaN there).

Prints one PASS/FAIL line per check; writes only under a temporary folder. Exit 0 when nothing
failed, 1 otherwise, 77 (skipped) without torch/transformers.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    from transformers import GptOssConfig
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

failed = 0


def check(ok, what):
    global failed
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    failed += not ok


def load(folder, name, dtype, shape):
    return np.fromfile(os.path.join(folder, name), dtype=dtype).reshape(shape)


def check_yarn(folder):
    ours = load(folder, "yarn.f32", np.float32, (2, 32))
    attention = load(folder, "yarn.f64", np.float64, (2,))
    for truncate in (False, True):
        config = GptOssConfig(num_hidden_layers=2, rope_parameters={
            "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": truncate, "original_max_position_embeddings": 4096})
        inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](config)
        theirs = inv_freq.to(torch.float32).numpy()
        diff = int(np.sum(theirs.view(np.uint32) != ours[int(truncate)].view(np.uint32)))
        rel = float(np.max(np.abs(ours[int(truncate)] / theirs - 1)))
        check(rel < 3e-7 and factor == attention[int(truncate)],
              f"yarn truncate={truncate}: {diff} of 32 entries differ in bits, at most {rel:.3g} "
              f"relative (torch's vectorized pow is 1 ulp off libm's powf on some), attention "
              f"factor {attention[int(truncate)]!r} vs {factor!r}")


def check_swiglu(folder):
    gate, up, dout = (torch.from_numpy(a.copy()) for a in load(folder, "swiglu_in.f32",
                                                                  np.float32, (3, -1)))
    out, dgate, dup = load(folder, "swiglu_out.f32", np.float32, (3, -1))
    config = GptOssConfig(hidden_size=8, intermediate_size=4, num_local_experts=1,
                          num_hidden_layers=2)
    experts = GptOssExperts(config)
    gate_up = torch.stack([gate, up], dim=-1).reshape(-1, 2).requires_grad_(True)  # interleaved
    y = experts._apply_gate(gate_up).reshape(-1)
    y.backward(dout)
    grad = gate_up.grad.reshape(-1, 2)
    pairs = [("out", y.detach().numpy(), out), ("dgate", grad[:, 0].numpy(), dgate),
             ("dup", grad[:, 1].numpy(), dup)]
    # Ours passes the gradient at a clamp's bound itself, as torch 2.11 (the GPU machine's, with
    # transformers 5.17) does; later torch blocks it there. Under such a torch, the inputs exactly
    # at a bound are left out of the comparison (said below); every other one must agree.
    probe = torch.tensor([7.0], requires_grad=True)
    probe.clamp(max=7.0).backward()
    passes = bool(probe.grad[0] != 0)
    at_bound = ((gate == 7.0) | (up.abs() == 7.0)).numpy()
    keep = np.ones_like(at_bound) if passes else ~at_bound
    for name, theirs, mine in pairs:
        theirs, mine = theirs[keep], mine[keep]
        rel = np.max(np.abs(mine - theirs)) / max(np.max(np.abs(theirs)), 1e-30)
        zeros = int(np.sum((theirs == 0) != (mine == 0)))
        check(rel < 1e-6 and zeros == 0, f"clamped swiglu {name}: rel err {rel:.3g}, "
              f"{zeros} places where one is exactly 0 and the other not (of {len(mine)})")
    edge = (gate == 7.0) & (up.abs() < 7) & (up != -1)  # up = -1 zeroes (up + 1)
    if passes:
        check(bool(torch.all(grad[edge, 0] != 0)), "torch passes the gradient at gate == 7")
    else:
        print(f"NOTE: torch {torch.__version__} blocks the gradient at a clamp's bound (torch "
              f"2.11 passes it, as ours does): {int(at_bound.sum())} inputs exactly at +-7 left "
              f"out of the comparison")


def check_mxfp4(folder):
    blocks = torch.from_numpy(load(folder, "mxfp4_blocks.u8", np.uint8, (1, 256, 16, 16)))
    scales = torch.from_numpy(load(folder, "mxfp4_scales.u8", np.uint8, (1, 256, 16)))
    ours = load(folder, "mxfp4.f32", np.float32, (1, 512, 256))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        for dtype in (torch.bfloat16, torch.float32):
            theirs = convert_moe_packed_tensors(blocks.to(device), scales.to(device), dtype=dtype)
            theirs = theirs.to(torch.float32).cpu().numpy()
            same = (theirs.view(np.uint32) == ours.view(np.uint32)) | (np.isnan(theirs) &
                                                                      np.isnan(ours))
            # scale 255 (row 255, E8M0's NaN) follows torch's ldexp: exact in 2.11, inf/NaN before
            old_torch = tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 11)
            if old_torch:
                same[:, :, 255] = True
            bad = np.argwhere(~same)
            first = ""
            if len(bad):
                _, k, r = bad[0]
                first = f"; first at row {r} (scale {r}) value {k}: {ours[0, k, r]} vs " \
                        f"{theirs[0, k, r]}"
            check(len(bad) == 0 and theirs.shape == ours.shape,
                  f"mxfp4 {device} {str(dtype)[6:]}: {len(bad)} of {ours.size} differ{first}"
                  f"{' (scale 255 not compared: torch before 2.11)' if old_torch else ''}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    dump = os.path.join(sys.argv[1], "bin", "gptoss_ops_dump")
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([dump, folder], check=True)
        print(f"torch {torch.__version__}")
        check_yarn(folder)
        check_swiglu(folder)
        check_mxfp4(folder)
    print(f"{'FAILED' if failed else 'OK'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
