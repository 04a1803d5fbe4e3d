#!/usr/bin/env python3
"""Writes a tiny Hugging Face Llama folder (config.json + safetensors) for the hf tests, with the
standard library only (struct + json): dim 64, 2 layers, 4 heads, 2 kv heads, ffn 160, vocab 256.

usage: hf_fixture.py DIR [--dtypes f32|mixed] [--shards N] [--tied] [--specials]
                         [--qwen2] [--llama3] [--yarn] [--corrupt MODE] [--seed S]
  --dtypes mixed  embedding BF16, layer 0 F16, the rest F32 (every converter is exercised)
  --specials      F16 subnormals, infinities and NaN in layer 0's q_proj (round trip only)
  --qwen2         Qwen2ForCausalLM: q/k/v projection biases (random values, not zeros)
  --llama-bias    LlamaForCausalLM with attention_bias: biases on q, k, v and o_proj
  --llama3        rope_scaling llama3 (factor 8, low 1, high 4, original context 64)
  --yarn          rope_scaling yarn (factor 4, beta_fast 32, beta_slow 1, truncate true, original
                  context 64, attention_factor 1.25), every key as the export writes it
  --tokenizer     also tokenizer.json (byte-level BPE without merges over printable ASCII, tab
                  and newline, ids 0-97, with <|im_start|> and <|im_end|> as 98 and 99) and a
                  tokenizer_config.json whose chat_template is Qwen2's ChatML
  --corrupt MODE  one broken thing: truncated, overlap, out_of_range, big_header, dtype, shape,
                  missing_shard, arch, rope (type longrope), rope_key (llama3 without its factor),
                  rope_band (high_freq_factor <= low), attention_bias (Llama's, also on o_proj),
                  bias_tensor (a bias in a Llama), missing_bias and bias_shape (with --qwen2),
                  head_dim, head_dim_huge, arch_escape, short_header, mistral_window (and mistral_ok: a valid Mistral
                  folder, window 4096; qwen2_window_off: Qwen2 with a short window turned off; qwen2_window:
                  one turned on for layer 1; qwen2_types_bad, qwen2_types_number,
                  qwen2_types_nowindow: layer_types with an entry we refuse),
                  eos_range (an eos id past the vocabulary)
"""
import argparse
import json
import math
import os
import random
import struct

DIM, LAYERS, HEADS, KV, FFN, VOCAB = 64, 2, 4, 2, 160, 256


def tensors(tied, qwen2=False, o_bias=False):
    """(name, shape) in model.c's order: the biases after each layer's nine weights."""
    hd = DIM // HEADS
    out = [("model.embed_tokens.weight", [VOCAB, DIM])]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [DIM]),
                (p + "self_attn.q_proj.weight", [HEADS * hd, DIM]),
                (p + "self_attn.k_proj.weight", [KV * hd, DIM]),
                (p + "self_attn.v_proj.weight", [KV * hd, DIM]),
                (p + "self_attn.o_proj.weight", [DIM, HEADS * hd]),
                (p + "post_attention_layernorm.weight", [DIM]),
                (p + "mlp.gate_proj.weight", [FFN, DIM]),
                (p + "mlp.up_proj.weight", [FFN, DIM]),
                (p + "mlp.down_proj.weight", [DIM, FFN])]
        if qwen2:
            out += [(p + "self_attn.q_proj.bias", [HEADS * hd]),
                    (p + "self_attn.k_proj.bias", [KV * hd]),
                    (p + "self_attn.v_proj.bias", [KV * hd])]
        if o_bias:
            out.append((p + "self_attn.o_proj.bias", [DIM]))
    out.append(("model.norm.weight", [DIM]))
    if not tied:
        out.append(("lm_head.weight", [VOCAB, DIM]))
    return out


def dtype_of(name, mode):
    if mode == "f32":
        return "F32"
    if name.startswith("model.embed_tokens"):
        return "BF16"
    return "F16" if name.startswith("model.layers.0.") else "F32"


def encode(values, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    f32 = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *[b >> 16 for b in f32])  # BF16: truncate


def values_for(name, shape, rng, specials):
    n = math.prod(shape)
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return [1.0 + 0.1 * rng.uniform(-1, 1) for _ in range(n)]
    v = [0.02 * rng.gauss(0, 1) for _ in range(n)]
    if specials and name == "model.layers.0.self_attn.q_proj.weight":
        v[:8] = [2.0 ** -24, -(2.0 ** -24), 3 * 2.0 ** -20, float("inf"), float("-inf"),
                 float("nan"), 65504.0, -0.0]
    return v


def write_file(path, entries, corrupt=None):
    """entries: [(name, dtype, shape, bytes)] -> one safetensors file."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    names = [e[0] for e in entries]
    if corrupt == "overlap" and len(names) > 1:  # second tensor starts inside the first
        a, b = header[names[0]]["data_offsets"], header[names[1]]["data_offsets"]
        size = b[1] - b[0]
        header[names[1]]["data_offsets"] = [a[0], a[0] + size]
    if corrupt == "out_of_range":
        o = header[names[-1]]["data_offsets"]
        header[names[-1]]["data_offsets"] = [o[0] + 1024, o[1] + 1024]
    if corrupt == "dtype":  # same byte count, unsupported dtype
        header[names[0]]["dtype"] = "I32" if entries[0][1] == "F32" else "I16"
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    hlen = len(text)
    if corrupt == "big_header":
        hlen = 200 << 20
    if corrupt == "short_header":  # sane length, but past the end of the file
        hlen = len(text) + len(data) + 8
    blob = struct.pack("<Q", hlen) + text + data
    if corrupt == "truncated":
        blob = blob[:-100]
    with open(path, "wb") as f:
        f.write(blob)


def config(args):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": DIM,
         "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
         "num_key_value_heads": KV, "head_dim": DIM // HEADS, "vocab_size": VOCAB,
         "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": args.tied, "attention_bias": False, "mlp_bias": False,
         "hidden_act": "silu", "max_position_embeddings": 256, "torch_dtype": "float32",
         "bos_token_id": 1, "eos_token_id": [2, 3] if args.llama3 else 2}
    if args.corrupt == "eos_range":
        c["eos_token_id"] = [2, VOCAB]
    if args.corrupt == "arch":
        c["architectures"] = ["GPT2LMHeadModel"]
    if args.corrupt == "arch_escape":  # a forged second line, in red (issue 14)
        c["architectures"] = ["Evil\nmtrun: all good\u001b[31m"]
    if args.qwen2:
        c["architectures"], c["model_type"] = ["Qwen2ForCausalLM"], "qwen2"
        for k in ("attention_bias", "mlp_bias", "head_dim"):  # not Qwen2 config keys
            del c[k]
        c.update(use_sliding_window=False, sliding_window=4096, max_window_layers=LAYERS)
    if args.corrupt == "qwen2_window_off":
        c["sliding_window"] = 16
    if args.corrupt == "qwen2_window":  # layer 1 of 2 slides over 16 keys (max_window_layers 1)
        c.update(use_sliding_window=True, sliding_window=16, max_window_layers=1)
    if args.corrupt == "qwen2_types_bad":
        c["layer_types"] = ["full_attention", "chunked_attention"]
    if args.corrupt == "qwen2_types_number":
        c["layer_types"] = ["full_attention", 1]
    if args.corrupt == "qwen2_types_nowindow":  # use_sliding_window false: no window to slide
        c["layer_types"] = ["sliding_attention", "full_attention"]
    if args.llama3 or args.corrupt in ("rope_key", "rope_band"):
        c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    if args.yarn:
        c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": True, "attention_factor": 1.25,
                             "original_max_position_embeddings": 64}
    if args.corrupt == "rope":
        c["rope_scaling"] = {"rope_type": "longrope", "factor": 4.0}
    if args.corrupt == "rope_key":
        del c["rope_scaling"]["factor"]
    if args.corrupt == "rope_band":
        c["rope_scaling"]["high_freq_factor"] = 1.0
    if args.corrupt == "attention_bias" or args.llama_bias:
        c["attention_bias"] = True
    if args.corrupt in ("mistral_window", "mistral_ok"):
        c["architectures"], c["model_type"] = ["MistralForCausalLM"], "mistral"
        c["sliding_window"] = 16 if args.corrupt == "mistral_window" else 4096
    if args.corrupt == "head_dim":
        c["head_dim"] = 32
    if args.corrupt == "head_dim_huge":  # head_dim x heads overflows an int (issue 14)
        c["head_dim"] = 575806099
    return c


QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_char(b):
    """GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest move up."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def write_tokenizer(folder):
    chars = [9, 10] + list(range(32, 127))  # tab, newline, printable ASCII: ids 0-96
    vocab = {byte_char(b): i for i, b in enumerate(chars)}
    vocab[byte_char(13)] = len(vocab)  # carriage return: 97
    specials = ["<|im_start|>", "<|im_end|>"]
    added = [{"id": 98 + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i, s in enumerate(specials)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": QWEN2_TEMPLATE, "eos_token": "<|im_end|>"}, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dtypes", default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--specials", action="store_true")
    ap.add_argument("--qwen2", action="store_true")
    ap.add_argument("--llama3", action="store_true")
    ap.add_argument("--yarn", action="store_true")
    ap.add_argument("--llama-bias", action="store_true")
    ap.add_argument("--corrupt")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tokenizer", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.tokenizer:
        write_tokenizer(args.dir)
    rng = random.Random(args.seed)
    entries = []
    for name, shape in tensors(args.tied, args.qwen2 or args.llama_bias, args.llama_bias):
        dt = dtype_of(name, args.dtypes)
        if args.corrupt == "shape" and name == "model.layers.1.mlp.up_proj.weight":
            shape = [shape[0] - 1, shape[1]]
        if args.corrupt == "bias_shape" and name == "model.layers.1.self_attn.k_proj.bias":
            shape = [shape[0] * 2]
        if args.corrupt == "missing_bias" and name == "model.layers.1.self_attn.v_proj.bias":
            continue
        entries.append((name, dt, shape, encode(values_for(name, shape, rng, args.specials), dt)))
    if args.corrupt == "bias_tensor":
        entries.append(("model.layers.0.self_attn.q_proj.bias", "F32", [DIM],
                        encode([0.0] * DIM, "F32")))
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(config(args), f, indent=2)
    file_corrupt = args.corrupt if args.corrupt in (
        "truncated", "overlap", "out_of_range", "big_header", "dtype", "short_header") else None
    if args.shards == 1:
        write_file(os.path.join(args.dir, "model.safetensors"), entries, file_corrupt)
        return
    per = -(-len(entries) // args.shards)
    weight_map = {}
    for s in range(args.shards):
        fname = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
        part = entries[s * per:(s + 1) * per]
        for e in part:
            weight_map[e[0]] = fname
        if args.corrupt == "missing_shard" and s == args.shards - 1:
            continue
        # the corruption goes into the last shard, so the earlier ones are checked clean first
        write_file(os.path.join(args.dir, fname), part,
                   file_corrupt if s == args.shards - 1 else None)
    with open(os.path.join(args.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(len(e[3]) for e in entries)},
                   "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
