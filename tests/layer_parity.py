#!/usr/bin/env python3
"""One Llama decoder layer of ours (cpu or cuda backend) against transformers'
LlamaDecoderLayer in fp32 on the same inputs: outputs, input gradients and every weight
gradient; with "qwen2", a Qwen2DecoderLayer (q/k/v biases, and their gradients); with
"gpt_oss", the Llama layer's attention before transformers' GptOssMLP (8 experts, top 2: the
router's bias and softmax over the top k, the experts' biases, the clamped SwiGLU of limit 7,
a quarter of the gate and up features biased past the clamps); with "deepseek", the Llama
layer's attention before transformers' DeepseekV3MoE (16 experts in 4 groups of which 2 are
kept, top 4, sigmoid scores with a correction bias that turns some negative, renormalised and
scaled by 2.5, two ungated shared experts); with "qwen35_attention", a
Qwen3_5DecoderLayer of full attention (the output gate, zero-centred norms, qk-norm per head,
a quarter of each head rotated), with "qwen35_linear" one of Gated DeltaNet (4 value heads over
2 key heads, two chunks of the rule per row); with "deepseek_v3", a DeepseekV3DecoderLayer with a
dense MLP (first_k_dense_replace covers it) whose multi-head latent attention has no low-rank
query path (q_lora_rank null) and plain RoPE halves, with "deepseek_v3_lora" one with q_lora_rank,
rope_interleave and YaRN (mscale and mscale_all_dim); values narrower than q and k in both, and
rms_norm_eps 1e-5 against the latent norms' 1e-6. Exit 77 (skipped) when torch or transformers
is missing, or the backend lacks the feature.
usage: layer_parity.py LAYER_CHECK_BINARY cpu|cuda
           [qwen2|gpt_oss|deepseek|qwen35_attention|qwen35_linear|deepseek_v3|
            deepseek_v3_lora]"""
import os, struct, subprocess, sys, tempfile

try:
    import torch
    from transformers import LlamaConfig, Qwen2Config
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds3
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

from tf_torch_only import torch_delta_rule, torch_linear_attn  # noqa: E402

torch_delta_rule()

binary, backend = sys.argv[1], sys.argv[2]
qwen2 = sys.argv[3:] == ["qwen2"]
gpt_oss = sys.argv[3:] == ["gpt_oss"]
qwen35 = sys.argv[3:] in (["qwen35_attention"], ["qwen35_linear"])
linear = sys.argv[3:] == ["qwen35_linear"]
mla_layer = sys.argv[3:] in (["deepseek_v3"], ["deepseek_v3_lora"])
lora = sys.argv[3:] == ["deepseek_v3_lora"]
dim, heads, kv, ffn, B, T = 256, 4, 2, 688, 2, 96  # head_dim 64
# DeepSeek's MLA: query rank (0: q_proj), latent, nope, rope and value head dims, interleaved
# pairs, YaRN (factor, original context, mscale, mscale_all_dim; factor 0: none)
mla = (48 if lora else 0, 64, 32, 16, 24, int(lora)) if mla_layer else (0,) * 6
yarn = (4.0, 32.0, 1.0, 0.8) if lora else (0.0,) * 4
# Qwen3.5: head_dim 32 (8 of it rotated); Gated DeltaNet's key heads, value heads, key dim, value
# dim and conv taps
head_dim, rotary, gdn = (32, 0.25, (2, 4, 32, 16, 4)) if qwen35 else (0, 0.0, (0,) * 5)
ds_moe = sys.argv[3:] == ["deepseek"]
experts, top_k, moe_ffn, limit = (8, 2, 64, 7.0) if gpt_oss else (0, 0, 0, 0.0)
# DeepSeek's groups, groups kept, norm_topk_prob, shared experts (their widths summed), scale
ds = (4, 2, 1, 2 * 48, 2.5) if ds_moe else (0, 0, 0, 0, 0.0)
if ds_moe:
    experts, top_k, moe_ffn = 16, 4, 48
theta, eps = 10000.0, 1e-5
torch.manual_seed(0)
common = dict(hidden_size=dim, intermediate_size=ffn, num_attention_heads=heads,
              num_key_value_heads=kv, rms_norm_eps=eps, rope_theta=theta,
              max_position_embeddings=4096)
if qwen2:
    cfg = Qwen2Config(**common, use_sliding_window=False)
elif qwen35:
    eps = 1e-6
    common.update(rms_norm_eps=eps, head_dim=head_dim)
    del common["rope_theta"]
    cfg = Qwen3_5TextConfig(
        **common, num_hidden_layers=1, hidden_act="silu",
        layer_types=["linear_attention" if linear else "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": theta,
                         "partial_rotary_factor": rotary},
        linear_num_key_heads=gdn[0], linear_num_value_heads=gdn[1], linear_key_head_dim=gdn[2],
        linear_value_head_dim=gdn[3], linear_conv_kernel_dim=gdn[4])
elif mla_layer:
    kv = heads
    common.update(num_key_value_heads=kv, max_position_embeddings=128)
    del common["rope_theta"]
    rope_parameters = {"rope_type": "default", "rope_theta": theta}
    if lora:
        rope_parameters.update(rope_type="yarn", factor=yarn[0],
                               original_max_position_embeddings=int(yarn[1]), mscale=yarn[2],
                               mscale_all_dim=yarn[3])
    cfg = DeepseekV3Config(**common, num_hidden_layers=1, first_k_dense_replace=1,
                           q_lora_rank=mla[0] or None, kv_lora_rank=mla[1],
                           qk_nope_head_dim=mla[2], qk_rope_head_dim=mla[3], v_head_dim=mla[4],
                           rope_interleave=bool(mla[5]), rope_parameters=rope_parameters,
                           attention_bias=False)
else:
    cfg = LlamaConfig(**common, attention_bias=False, mlp_bias=False)
cfg._attn_implementation = "eager"
if qwen35:
    layer = q35.Qwen3_5DecoderLayer(cfg, layer_idx=0).float()
    if linear:  # the torch reference on these CPU tensors, not a hub kernel
        torch_linear_attn(layer.linear_attn)
elif mla_layer:
    layer = ds3.DeepseekV3DecoderLayer(cfg, layer_idx=0).float()
else:
    layer = (Qwen2DecoderLayer if qwen2 else LlamaDecoderLayer)(cfg, layer_idx=0).float()


class FirstOutput(torch.nn.Module):
    """GptOssMLP returns (hidden, router_scores); the Llama layer wants the hidden states."""

    def __init__(self, mlp):
        super().__init__()
        self.moe = mlp

    def forward(self, x):
        return self.moe(x)[0]


if gpt_oss:
    oss = GptOssConfig(hidden_size=dim, intermediate_size=moe_ffn, num_local_experts=experts,
                       num_experts_per_tok=top_k, swiglu_limit=limit)
    oss._experts_implementation = "eager"
    layer.mlp = FirstOutput(GptOssMLP(oss).float())
if ds_moe:
    dsc = DeepseekV3Config(hidden_size=dim, intermediate_size=ffn, moe_intermediate_size=moe_ffn,
                           n_routed_experts=experts, num_experts_per_tok=top_k, n_group=ds[0],
                           topk_group=ds[1], norm_topk_prob=bool(ds[2]), n_shared_experts=2,
                           routed_scaling_factor=ds[4])
    dsc._experts_implementation = "eager"
    layer.mlp = ds3.DeepseekV3MoE(dsc).float()


def initial(n, p):
    """Norm weights near 1 (zero-centred ones near 0), matrices and biases small; Gated
    DeltaNet's conv of some weight, dt_bias near 1, A_log as the module draws it."""
    if n.endswith("A_log"):
        return torch.empty_like(p).uniform_(1, 16).log()
    if n.endswith("dt_bias"):
        return 1.0 + 0.1 * torch.randn_like(p)
    if "conv1d" in n:
        return 0.3 * torch.randn_like(p)
    if "norm" in n:
        return (0.0 if qwen35 and "linear_attn" not in n else 1.0) + 0.1 * torch.randn_like(p)
    return 0.05 * torch.randn_like(p)


with torch.no_grad():
    for n, p in layer.named_parameters():
        p.copy_(initial(n, p))
    if gpt_oss:  # gate (even columns) f % 4 == 0 above +7, up (odd) f % 4 == 1 above, 2 below
        bias = layer.mlp.moe.experts.gate_up_proj_bias
        bias[:, 0::8] += 10.0
        bias[:, 3::8] += 10.0
        bias[:, 5::8] -= 10.0
    if ds_moe:  # the router's logits larger, and a correction bias that moves choices and,
        # at -0.6 and below, makes scores negative (where masking with 0 would differ from -inf)
        layer.mlp.gate.weight.mul_(6.0)
        layer.mlp.gate.e_score_correction_bias.copy_(0.4 * torch.randn(experts) - 0.3)
    # bf16-representable weights and inputs: the GPU backend streams bf16 weights
    for p in list(layer.parameters()) + list(layer.buffers()):
        p.copy_(p.bfloat16().float())
attn = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "post_attention_layernorm"]
dense = ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
params = dict(layer.named_parameters())
names = [n + ".weight" for n in attn + ([] if gpt_oss or ds_moe else dense)]
if qwen2:  # our layout: the biases after the nine weights
    names += [f"self_attn.{x}_proj.bias" for x in "qkv"]
if qwen35:  # roles.h's order: the norms after the MLP; Gated DeltaNet's tensors in place of
    names += ["self_attn.q_norm.weight", "self_attn.k_norm.weight"]  # the attention's
    if linear:
        gdn_names = ["in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                     "in_proj_a.weight", "conv1d.weight", "dt_bias", "A_log", "norm.weight",
                     "out_proj.weight"]
        names = ["input_layernorm.weight", "post_attention_layernorm.weight"] + \
            [n + ".weight" for n in dense] + ["linear_attn." + n for n in gdn_names]
if mla_layer:  # roles.h's order: the norms and the MLP, then the latent attention's tensors
    mla_names = ["q_a_proj", "q_a_layernorm", "q_b_proj"] if lora else ["q_proj"]
    mla_names += ["kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"]
    names = ["input_layernorm.weight", "post_attention_layernorm.weight"] + \
        [n + ".weight" for n in dense] + [f"self_attn.{n}.weight" for n in mla_names]


def our_layout(name, t):
    """A tensor (or its gradient) in our layout: the fused experts split per expert, gate and up
    de-interleaved, the matrices as [out, in]."""
    if name == "mlp.moe.experts.gate_up_proj":
        return [t[:, :, 0::2].transpose(1, 2), t[:, :, 1::2].transpose(1, 2)]
    if name == "mlp.moe.experts.down_proj":
        return [t.transpose(1, 2)]
    if name == "mlp.moe.experts.gate_up_proj_bias":
        return [t[:, 0::2], t[:, 1::2]]
    if name == "mlp.experts.gate_up_proj":  # DeepSeek's: gate rows, then up rows
        return [t[:, :moe_ffn], t[:, moe_ffn:]]
    return [t]


if gpt_oss:  # roles.h's order: router, the experts' gate, up, down; then the biases
    names += ["mlp.moe.router.weight", "mlp.moe.experts.gate_up_proj",
              "mlp.moe.experts.down_proj", "mlp.moe.router.bias",
              "mlp.moe.experts.gate_up_proj_bias", "mlp.moe.experts.down_proj_bias"]
if ds_moe:  # roles.h's order: router, experts, shared experts, the correction bias last
    names += ["mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
    names += [f"mlp.shared_experts.{x}_proj.weight" for x in ("gate", "up", "down")]
    names += ["mlp.gate.e_score_correction_bias"]
    params.update(dict(layer.named_buffers()))
x = torch.randn(B, T, dim).bfloat16().float().requires_grad_(True)
dout = torch.randn(B, T, dim).bfloat16().float()
rope = q35.Qwen3_5TextRotaryEmbedding(cfg) if qwen35 else \
    ds3.DeepseekV3RotaryEmbedding(cfg) if mla_layer else LlamaRotaryEmbedding(cfg)
pos = torch.arange(T).unsqueeze(0).expand(B, T)
# Qwen3.5's mRoPE takes positions [3, B, T] (transformers 5.17 indexes them so; later versions
# also expand [B, T]); text gives all three sections the same 1-D positions.
cos_sin = rope(x, pos[None].expand(3, B, T) if qwen35 else pos)
mask = torch.full((T, T), float("-inf")).triu(1)[None, None].expand(B, 1, T, T)
if linear:  # the text model gives its linear layers no mask without padding
    mask = None
out = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
out = out[0] if isinstance(out, tuple) else out
out.backward(dout)

with tempfile.TemporaryDirectory() as tmp:
    fin, fout = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(fin, "wb") as f:
        f.write(struct.pack("7i2f", dim, heads, kv, ffn, B, T, int(qwen2), theta, eps))
        router = 1 if gpt_oss else 2 if ds_moe else 0
        f.write(struct.pack("4if", experts, top_k, moe_ffn, router, limit))
        f.write(struct.pack("8if", int(qwen35), int(linear), *gdn, head_dim, rotary))
        f.write(struct.pack("4if", *ds))
        f.write(struct.pack("7i4f", int(mla_layer), *mla, *yarn))
        for n in names:
            for t in our_layout(n, params[n].detach()):
                f.write(t.contiguous().numpy().tobytes())
        f.write(x.detach().numpy().tobytes())
        f.write(dout.numpy().tobytes())
    rc = subprocess.run([binary, backend, fin, fout]).returncode
    if rc == 77:
        print(f"SKIPPED: backend {backend} unavailable{' for ' + sys.argv[3] if sys.argv[3:] else ''}")
        sys.exit(77)
    assert rc == 0, f"layer_check exited {rc}"
    ours = torch.frombuffer(bytearray(open(fout, "rb").read()), dtype=torch.float32)

# bf16 on the GPU: 2e-2; 3e-2 for a Gated DeltaNet layer, whose gradients into in_proj_qkv and
# the conv cross twice the bf16 roundings of attention's (the projection's output, the conv's,
# q and k normalised, and the gradient of the projection's output), where an H100 measured
# 2.4e-2 and 2.6e-2 (the rule's own kernels agree with the CPU's to 1e-6: gdn_cuda_vs_cpu)
tol = 1e-4 if backend == "cpu" else 3e-2 if linear else 2e-2
n = B * T * dim
checks = [("output", ours[:n], out.detach().flatten()), ("dx", ours[n:2 * n], x.grad.flatten())]
off = 2 * n
for name in names:
    grad = params[name].grad
    if grad is None:  # a buffer (the correction bias): no gradient, ours exactly 0
        grad = torch.zeros_like(params[name])
    parts = our_layout(name, grad)
    for i, part in enumerate(parts):
        g = part.flatten()
        what = name + ("" if len(parts) == 1 else [" (gate)", " (up)"][i])
        checks.append(("d " + what, ours[off:off + g.numel()], g))
        off += g.numel()
failed, extra = 0, 0
for name, a, b in checks:
    if b.norm() == 0:  # a buffer's gradient: exactly 0, checked bitwise
        ok = bool((a == 0).all())
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: {backend} {name}: exactly 0, as transformers' buffer")
        continue
    err = ((a - b).norm() / b.norm()).item()
    ok = err < tol
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'}: {backend} {name}: relative error {err:.2e} < {tol:g}")
for name, a, b in checks if gpt_oss else []:  # past a clamp no gradient passes
    if "gate_up_proj_bias" in name:
        blocked = b == 0
        ok = bool(blocked.sum() >= experts) and bool((a[blocked] == 0).all())
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: {backend} {name}: exactly 0 where transformers' is "
              f"({int(blocked.sum())} of {b.numel()} features clamped)")
        extra += 1
print(f"{len(checks) + extra - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
