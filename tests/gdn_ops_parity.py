#!/usr/bin/env python3
"""Gated DeltaNet's CPU kernels against transformers, on the inputs build/bin/gdn_ops_dump writes.

usage: gdn_ops_parity.py BUILD_DIR

Row 0 of every input is one document; row 1 packs three (starts in dims.i32), which our kernels
take through doc_start and transformers, which has no packing, runs one at a time: each
document's outputs and input gradients against transformers on that document alone, parameter
gradients summed over the documents. All in fp32, with autograd for transformers' gradients:
- conv: causal_conv1d_silu_* against causal_conv1d_fn (activation "silu");
- delta: l2norm of q and k then the chunked rule (and the recurrent one), with q scaled by
  1/sqrt(dk), against torch_chunk_gated_delta_rule (and torch_recurrent_gated_delta_rule) with
  use_qk_l2norm_in_kernel=True, as Qwen3_5GatedDeltaNet calls them, 4 value heads over 2 key heads;
- gates: g and beta against the module's own expressions (-A_log.exp() * softplus(a + dt_bias),
  b.sigmoid()), a + dt_bias on both sides of softplus's threshold 20;
- norm: rmsnorm_gated_* against Qwen3_5RMSNormGated;
- layer: the whole Qwen3_5GatedDeltaNet (cache None, no attention mask) against our kernels
  composed as its forward composes them, with linear.c for the projections.

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
    import torch.nn.functional as F
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

from tf_torch_only import torch_delta_rule, torch_linear_attn  # noqa: E402

torch_delta_rule()

failed = 0
FWD_TOL, GRAD_TOL = 1e-5, 3e-5


def check(ok, what):
    global failed
    print(f"{'PASS' if ok else 'FAIL'}: {what}")
    failed += not ok


def rel_err(mine, theirs):
    theirs = np.asarray(theirs, dtype=np.float64)
    return float(np.max(np.abs(mine - theirs)) / max(np.max(np.abs(theirs)), 1e-30))


def compare(name, mine, theirs, tol):
    rel = rel_err(mine, theirs)
    check(rel < tol, f"{name}: rel err {rel:.3g} (< {tol:g})")


class Dump:
    def __init__(self, folder):
        self.folder = folder
        d = np.fromfile(os.path.join(folder, "dims.i32"), dtype=np.int32)
        self.B, self.T, self.HK, self.H, self.dk, self.dv, self.K, self.D = (int(x) for x in d[:8])
        self.starts = [int(x) for x in d[8:]]
        self.C = 2 * self.HK * self.dk + self.H * self.dv

    def arrays(self, name, shapes):
        """The arrays of DIR/name, one after the other, as float32 tensors of these shapes."""
        flat = np.fromfile(os.path.join(self.folder, name), dtype=np.float32)
        out, at = [], 0
        for shape in shapes:
            n = int(np.prod(shape))
            out.append(torch.from_numpy(flat[at:at + n].reshape(shape).copy()))
            at += n
        assert at == len(flat), f"{name}: {len(flat)} floats, expected {at}"
        return out

    def documents(self):
        """(row, start, end) of every document: row 0 whole, row 1's packed ones."""
        ends = self.starts[1:] + [self.T]
        return [(0, 0, self.T)] + [(1, s, e) for s, e in zip(self.starts, ends)]


def causal_conv1d_silu(x, w):
    """transformers' causal_conv1d_fn with activation "silu" on x [1, C, L]; releases without it
    ran nn.Conv1d(padding K - 1)[..., :L] then silu in the module, the same computation."""
    fn = getattr(q35, "causal_conv1d_fn", None)
    if fn is not None:
        return fn(x, w, None, activation="silu")
    return F.silu(F.conv1d(x, w.unsqueeze(1), padding=w.shape[-1] - 1, groups=w.shape[0])
                  [..., :x.shape[-1]])


def per_document(dump, inputs, dout, fn):
    """Runs fn on each document's slice of the [B, T, ...] inputs, backward with dout's slice:
    the outputs and input gradients put back in place, [B, T, ...] like the inputs."""
    out = torch.zeros_like(dout)
    grads = [torch.zeros_like(x) for x in inputs]
    for b, s, e in dump.documents():
        xs = [x[b:b + 1, s:e].clone().requires_grad_(True) for x in inputs]
        y = fn(*xs)
        y.backward(dout[b:b + 1, s:e])
        out[b, s:e] = y.detach()[0]
        for g, x in zip(grads, xs):
            g[b, s:e] = x.grad[0]
    return out, grads


def check_conv(dump):
    B, T, C, K = dump.B, dump.T, dump.C, dump.K
    x, w, dout = dump.arrays("conv_in.f32", [(B, T, C), (C, K), (B, T, C)])
    out, dx, dw = dump.arrays("conv_out.f32", [(B, T, C), (B, T, C), (C, K)])
    w = w.requires_grad_(True)

    def conv(xs):
        return causal_conv1d_silu(xs.transpose(1, 2), w).transpose(1, 2)

    theirs, (tdx,) = per_document(dump, [x], dout, conv)
    compare("conv1d+silu out", out.numpy(), theirs, FWD_TOL)
    compare("conv1d+silu dx", dx.numpy(), tdx, GRAD_TOL)
    compare("conv1d+silu dw (summed over the documents)", dw.numpy(), w.grad, GRAD_TOL)


def gva(q, k, H):
    """q and k repeated to the value heads, as Qwen3_5GatedDeltaNet.forward does before the rule
    in transformers 5.17 (whose torch_*_gated_delta_rule take equal head counts; later releases
    repeat inside). Autograd sums the copies' gradients back, as our kernels do."""
    r = H // q.shape[2]
    return (q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)) if r > 1 else (q, k)


def check_delta(dump):
    B, T, HK, H, dk, dv = dump.B, dump.T, dump.HK, dump.H, dump.dk, dump.dv
    shapes = [(B, T, HK, dk), (B, T, HK, dk), (B, T, H, dv), (B, T, H), (B, T, H)]
    *inputs, dout = dump.arrays("delta_in.f32", shapes + [(B, T, H, dv)])
    for ours, form, fn, theirs_name in (
            ("delta_out.f32", "chunked", q35.torch_chunk_gated_delta_rule, "torch_chunk"),
            ("delta_rec.f32", "recurrent", q35.torch_recurrent_gated_delta_rule,
             "torch_recurrent")):
        out, *grads = dump.arrays(ours, [(B, T, H, dv)] + shapes)
        theirs, tgrads = per_document(
            dump, inputs, dout,
            lambda q, k, v, g, beta: fn(*gva(q, k, H), v, g=g, beta=beta,
                                        use_qk_l2norm_in_kernel=True)[0])
        compare(f"delta rule {form} out vs {theirs_name}", out.numpy(), theirs, FWD_TOL)
        for name, mine, t in zip(("dq", "dk", "dv", "dg", "dbeta"), grads, tgrads):
            compare(f"delta rule {form} {name} vs {theirs_name}", mine.numpy(), t, GRAD_TOL)


def check_gates(dump):
    n, H = dump.B * dump.T, dump.H
    a, b, A_log, dt_bias, dg, dbeta = dump.arrays("gates_in.f32",
                                                  [(n, H), (n, H), (H,), (H,), (n, H), (n, H)])
    g, beta, da, db, dA_log, ddt_bias = dump.arrays("gates_out.f32",
                                                    [(n, H), (n, H), (n, H), (n, H), (H,), (H,)])
    ts = [t.clone().requires_grad_(True) for t in (a, b, A_log, dt_bias)]
    ta, tb, tA, tdt = ts
    tg = -tA.float().exp() * F.softplus(ta.float() + tdt)  # Qwen3_5GatedDeltaNet.forward's
    tbeta = tb.sigmoid()
    torch.autograd.backward([tg, tbeta], [dg, dbeta])
    above = int(((a + dt_bias) > 20).sum())
    compare(f"gates g ({above} of {a.numel()} above softplus's threshold)", g.numpy(),
            tg.detach(), FWD_TOL)
    compare("gates beta", beta.numpy(), tbeta.detach(), FWD_TOL)
    for name, mine, t in zip(("da", "db", "dA_log", "ddt_bias"), (da, db, dA_log, ddt_bias), ts):
        compare(f"gates {name}", mine.numpy(), t.grad, GRAD_TOL)


def check_norm(dump):
    n, dv = dump.B * dump.T * dump.H, dump.dv
    x, z, w, dout = dump.arrays("norm_in.f32", [(n, dv), (n, dv), (dv,), (n, dv)])
    out, dx, dz, dw = dump.arrays("norm_out.f32", [(n, dv), (n, dv), (n, dv), (dv,)])
    norm = q35.Qwen3_5RMSNormGated(dv, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(w)
    tx, tz = x.clone().requires_grad_(True), z.clone().requires_grad_(True)
    y = norm(tx, tz)
    y.backward(dout)
    compare("gated rmsnorm out", out.numpy(), y.detach(), FWD_TOL)
    for name, mine, t in (("dx", dx, tx.grad), ("dz", dz, tz.grad), ("dweight", dw, norm.weight.grad)):
        compare(f"gated rmsnorm {name}", mine.numpy(), t, GRAD_TOL)


PARAMS = ["in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
          "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight"]


def check_layer(dump):
    B, T, D = dump.B, dump.T, dump.D
    config = Qwen3_5TextConfig(
        hidden_size=D, linear_num_key_heads=dump.HK, linear_num_value_heads=dump.H,
        linear_key_head_dim=dump.dk, linear_value_head_dim=dump.dv,
        linear_conv_kernel_dim=dump.K, num_hidden_layers=1, layer_types=["linear_attention"],
        rms_norm_eps=1e-6, hidden_act="silu")
    layer = q35.Qwen3_5GatedDeltaNet(config, layer_idx=0)
    # Releases that kept fla / causal-conv1d kernels on the module pick them by availability,
    # not by device: keep the torch reference on these CPU tensors.
    torch_linear_attn(layer)
    params = dict(layer.named_parameters())
    shapes = [tuple(params[p].shape) for p in PARAMS]
    hidden, *weights, dout = dump.arrays("layer_in.f32", [(B, T, D)] + shapes + [(B, T, D)])
    out, dhidden, *dweights = dump.arrays("layer_out.f32", [(B, T, D), (B, T, D)] + shapes)
    with torch.no_grad():
        for p, w in zip(PARAMS, weights):
            params[p].copy_(w)
    theirs, (tdh,) = per_document(dump, [hidden], dout, lambda h: layer(h))
    compare("Qwen3_5GatedDeltaNet out", out.numpy(), theirs, FWD_TOL)
    compare("Qwen3_5GatedDeltaNet dhidden", dhidden.numpy(), tdh, GRAD_TOL)
    for p, mine in zip(PARAMS, dweights):
        compare(f"Qwen3_5GatedDeltaNet d{p} (summed over the documents)", mine.numpy(),
                params[p].grad, GRAD_TOL)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    dump_bin = os.path.join(sys.argv[1], "bin", "gdn_ops_dump")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([dump_bin, folder], check=True)
        print(f"torch {torch.__version__}")
        dump = Dump(folder)
        check_conv(dump)
        check_delta(dump)
        check_gates(dump)
        check_norm(dump)
        check_layer(dump)
    print(f"{'FAILED' if failed else 'OK'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
