#!/usr/bin/env python3
"""One Llama decoder layer of ours (cpu or cuda backend) against transformers'
LlamaDecoderLayer in fp32 on the same inputs: outputs, input gradients and every weight
gradient; with "qwen2", a Qwen2DecoderLayer (q/k/v biases, and their gradients). Exit 77
(skipped) when torch or transformers is missing, or the backend lacks the feature.
usage: layer_parity.py LAYER_CHECK_BINARY cpu|cuda [qwen2]"""
import os, struct, subprocess, sys, tempfile

try:
    import torch
    from transformers import LlamaConfig, Qwen2Config
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

binary, backend = sys.argv[1], sys.argv[2]
qwen2 = sys.argv[3:] == ["qwen2"]
dim, heads, kv, ffn, B, T = 256, 4, 2, 688, 2, 96  # head_dim 64
theta, eps = 10000.0, 1e-5
torch.manual_seed(0)
common = dict(hidden_size=dim, intermediate_size=ffn, num_attention_heads=heads,
              num_key_value_heads=kv, rms_norm_eps=eps, rope_theta=theta,
              max_position_embeddings=4096)
if qwen2:
    cfg = Qwen2Config(**common, use_sliding_window=False)
else:
    cfg = LlamaConfig(**common, attention_bias=False, mlp_bias=False)
cfg._attn_implementation = "eager"
layer = (Qwen2DecoderLayer if qwen2 else LlamaDecoderLayer)(cfg, layer_idx=0).float()
with torch.no_grad():
    for n, p in layer.named_parameters():  # norm weights near 1, matrices and biases small
        p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in n else 0.05 * torch.randn_like(p))
    # bf16-representable weights and inputs: the GPU backend streams bf16 weights
    for p in layer.parameters():
        p.copy_(p.bfloat16().float())
order = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
         "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
         "mlp.down_proj"]
params = dict(layer.named_parameters())
names = [n + ".weight" for n in order]
if qwen2:  # our layout: the biases after the nine weights
    names += [f"self_attn.{x}_proj.bias" for x in "qkv"]
x = torch.randn(B, T, dim).bfloat16().float().requires_grad_(True)
dout = torch.randn(B, T, dim).bfloat16().float()
rope = LlamaRotaryEmbedding(cfg)
pos = torch.arange(T).unsqueeze(0).expand(B, T)
cos_sin = rope(x, pos)
mask = torch.full((T, T), float("-inf")).triu(1)[None, None].expand(B, 1, T, T)
out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
out = out[0] if isinstance(out, tuple) else out
out.backward(dout)

with tempfile.TemporaryDirectory() as tmp:
    fin, fout = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(fin, "wb") as f:
        f.write(struct.pack("7i2f", dim, heads, kv, ffn, B, T, int(qwen2), theta, eps))
        for n in names:
            f.write(params[n].detach().contiguous().numpy().tobytes())
        f.write(x.detach().numpy().tobytes())
        f.write(dout.numpy().tobytes())
    rc = subprocess.run([binary, backend, fin, fout]).returncode
    if rc == 77:
        print(f"SKIPPED: backend {backend} unavailable{' for qwen2' if qwen2 else ''}")
        sys.exit(77)
    assert rc == 0, f"layer_check exited {rc}"
    ours = torch.frombuffer(bytearray(open(fout, "rb").read()), dtype=torch.float32)

tol = 1e-4 if backend == "cpu" else 2e-2
n = B * T * dim
checks = [("output", ours[:n], out.detach().flatten()), ("dx", ours[n:2 * n], x.grad.flatten())]
off = 2 * n
for name in names:
    g = params[name].grad.flatten()
    checks.append(("d " + name, ours[off:off + g.numel()], g))
    off += g.numel()
failed = 0
for name, a, b in checks:
    err = ((a - b).norm() / b.norm()).item()
    ok = err < tol
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {backend} {name}: relative error {err:.2e} < {tol:g}")
print(f"{len(checks) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
