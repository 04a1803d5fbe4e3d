#!/usr/bin/env python3
"""A whole tiny Qwen3_5ForCausalLM (random weights, fp32) against our CPU templates
(tests/model_check.c): three Gated DeltaNet layers (4 value heads over 2 key heads) and one of
gated full attention, zero-centred norms, qk-norm per head, a quarter of each head rotated, tied
embeddings, rows of 80 tokens (the delta rule's chunks of 64 and a remainder). The summed
cross-entropy of the same tokens and targets, and every parameter's gradient.
Exit 77 (skipped) without torch or transformers.
usage: model_parity.py MODEL_CHECK_BINARY"""
import os, struct, subprocess, sys, tempfile

try:
    import torch
    import torch.nn.functional as F
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as q35
except ImportError as e:
    print(f"SKIPPED: {e}")
    sys.exit(77)

from tf_torch_only import torch_delta_rule, torch_linear_attn  # noqa: E402

torch_delta_rule()

binary = sys.argv[1]
types = ["linear_attention"] * 3 + ["full_attention"]
dim, heads, kv, head_dim, ffn, vocab, B, T = 64, 4, 2, 16, 128, 97, 2, 80
gdn = (2, 4, 16, 8, 4)  # key heads, value heads, key dim, value dim, conv taps
eps, theta, rotary = 1e-6, 10000.0, 0.25
torch.manual_seed(0)
cfg = Qwen3_5TextConfig(
    hidden_size=dim, intermediate_size=ffn, num_hidden_layers=len(types), num_attention_heads=heads,
    num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab, rms_norm_eps=eps,
    hidden_act="silu", layer_types=types, tie_word_embeddings=True, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": rotary},
    linear_num_key_heads=gdn[0], linear_num_value_heads=gdn[1], linear_key_head_dim=gdn[2],
    linear_value_head_dim=gdn[3], linear_conv_kernel_dim=gdn[4])
cfg._attn_implementation = "eager"
model = q35.Qwen3_5ForCausalLM(cfg).float()
for layer in model.model.layers:  # the torch reference on CPU tensors, not a hub kernel
    torch_linear_attn(getattr(layer, "linear_attn", None))


def initial(n, p):
    """Zero-centred norms near 0 (the gated norm's plain weight near 1), matrices small,
    Gated DeltaNet's conv of some weight, dt_bias near 1, A_log as the module draws it."""
    if n.endswith("A_log"):
        return torch.empty_like(p).uniform_(1, 16).log()
    if n.endswith("dt_bias") or n.endswith("linear_attn.norm.weight"):
        return 1.0 + 0.1 * torch.randn_like(p)
    if "conv1d" in n:
        return 0.3 * torch.randn_like(p)
    if "norm" in n:
        return 0.1 * torch.randn_like(p)
    return (0.5 if "embed" in n else 0.05) * torch.randn_like(p)


with torch.no_grad():
    for n, p in model.named_parameters():
        p.copy_(initial(n, p))
params = dict(model.named_parameters())
dense = ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"]
norms = ["input_layernorm.weight", "post_attention_layernorm.weight"]
softmax = ["input_layernorm.weight"] + [f"self_attn.{x}_proj.weight" for x in "qkvo"] + \
    ["post_attention_layernorm.weight"] + dense + ["self_attn.q_norm.weight",
                                                   "self_attn.k_norm.weight"]
linear = norms + dense + ["linear_attn." + n for n in (
    "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
    "conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight")]
# our groups, each in roles.h's order: the embedding, the layers, the head (the final norm)
groups = [["model.embed_tokens.weight"]]
for l, t in enumerate(types):
    groups.append([f"model.layers.{l}.{n}" for n in (linear if t == "linear_attention" else softmax)])
groups.append(["model.norm.weight"])

tokens = torch.randint(0, vocab, (B, T))
targets = torch.randint(0, vocab, (B, T))
logits = model(input_ids=tokens).logits
loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="sum")
loss.backward()

with tempfile.TemporaryDirectory() as tmp:
    fin, fout = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(fin, "wb") as f:
        f.write(struct.pack("14i3f", dim, len(types), heads, kv, head_dim, ffn, vocab, B, T, *gdn,
                            eps, theta, rotary))
        f.write(",".join(types).encode().ljust(256, b"\0"))
        for g in groups:
            for n in g:
                f.write(params[n].detach().contiguous().numpy().tobytes())
        f.write(tokens.int().numpy().tobytes())
        f.write(targets.int().numpy().tobytes())
    rc = subprocess.run([binary, fin, fout]).returncode
    assert rc == 0, f"model_check exited {rc}"
    raw = open(fout, "rb").read()
ours_loss = struct.unpack("d", raw[:8])[0]
ours = torch.frombuffer(bytearray(raw[8:]), dtype=torch.float32)
failed, checks = 0, 0


def check(ok, what):
    global failed, checks
    failed += not ok
    checks += 1
    print(f"{'PASS' if ok else 'FAIL'}: {what}")


rel = abs(ours_loss - loss.item()) / loss.item()
check(rel < 1e-5, f"summed loss {ours_loss:.6f} vs transformers' {loss.item():.6f}: "
      f"relative error {rel:.2e} < 1e-5")
off, tol = 0, 1e-4
for g in groups:
    for n in g:
        grad = params[n].grad.flatten()
        mine = ours[off:off + grad.numel()]
        off += grad.numel()
        err = ((mine - grad).norm() / grad.norm()).item()
        check(err < tol, f"d {n}: relative error {err:.2e} < {tol:g}")
check(off == ours.numel(), f"our groups hold {ours.numel()} values, transformers' {off}")
print(f"{checks - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
