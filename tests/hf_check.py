#!/usr/bin/env python3
"""Checks an exported Hugging Face folder with the standard library only.

usage: hf_check.py EXPORT [--against FIXTURE] [--min-shards N] [--bf16]
  - config.json is a LlamaForCausalLM (or Qwen2ForCausalLM, MistralForCausalLM) config, torch_dtype
    float32
    (bfloat16 with --bf16); with --against, the fixture's class, rope_scaling, attention_bias and
    sliding_window
    exactly (Mistral's window is model.sliding_window and comes back; a Mistral without one
    comes out as the Llama it is);
  - model.safetensors.index.json maps every tensor to the shard that holds it, total_size right;
  - each shard passes the checks of the safetensors library: header length a multiple of 8,
    tensors F32, contiguous from offset 0 and covering the data exactly;
  - with --against: every tensor equals the fixture's, decoded independently here (BF16, F16
    with subnormals/inf/NaN, F32): the C converter is checked against Python's struct; with
    --bf16, the fixture's values rounded to bf16 (nearest even, as torch).
"""
import argparse
import json
import math
import os
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    header.pop("__metadata__", None)
    return hlen, header, blob[8 + hlen:]


def decode(dtype, raw):
    if dtype == "U8":
        return list(raw)
    n = len(raw) // {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    if dtype == "F32":
        return list(struct.unpack(f"<{n}f", raw))
    if dtype == "F16":
        return list(struct.unpack(f"<{n}e", raw))
    halves = struct.unpack(f"<{n}H", raw)
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *[h << 16 for h in halves])))


def load_folder(d):
    """name -> (dtype, shape, values), U8 as byte values"""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    out = {}
    for fname in files:
        _, header, data = read_safetensors(os.path.join(d, fname))
        for name, e in header.items():
            a, b = e["data_offsets"]
            out[name] = (e["dtype"], e["shape"], decode(e["dtype"], data[a:b]))
    return out


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def to_bf16(x):
    """Round to nearest even, as torch's .to(torch.bfloat16)."""
    if math.isnan(x):
        return x
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def check_structure(d, min_shards, bf16):
    dtype, torch_dtype, size = ("BF16", "bfloat16", 2) if bf16 else ("F32", "float32", 4)
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg["architectures"][0] not in ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM",
                                       "GptOssForCausalLM") or \
            len(cfg["architectures"]) != 1 or cfg["torch_dtype"] != torch_dtype:
        fail(f"config.json: not a {torch_dtype} LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wm, total = index["weight_map"], 0
    shards = sorted(set(wm.values()))
    if len(shards) < min_shards:
        fail(f"{len(shards)} shards, expected at least {min_shards}")
    for i, fname in enumerate(shards):
        if fname != f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors":
            fail(f"unexpected shard name {fname}")
        hlen, header, data = read_safetensors(os.path.join(d, fname))
        if hlen % 8:
            fail(f"{fname}: header length {hlen} not a multiple of 8")
        spans = sorted(e["data_offsets"] for e in header.values())
        end = 0
        for a, b in spans:
            if a != end:
                fail(f"{fname}: data not contiguous at {a}")
            end = b
        if end != len(data):
            fail(f"{fname}: tensors cover {end} of {len(data)} data bytes")
        for name, e in header.items():
            if e["dtype"] != dtype or wm.get(name) != fname:
                fail(f"{fname}: {name}: dtype {e['dtype']} or index entry {wm.get(name)}")
            if (e["data_offsets"][1] - e["data_offsets"][0]) != size * math.prod(e["shape"]):
                fail(f"{fname}: {name}: size does not match its shape")
        total += len(data)
    if index["metadata"]["total_size"] != total:
        fail(f"total_size {index['metadata']['total_size']} != {total}")
    return len(shards), len(wm)


def same(x, y):
    return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("--against")
    ap.add_argument("--min-shards", type=int, default=1)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    n_shards, n_tensors = check_structure(args.export, args.min_shards, args.bf16)
    if args.against:
        cw = json.load(open(os.path.join(args.against, "config.json")))
        cg = json.load(open(os.path.join(args.export, "config.json")))
        arch = cw["architectures"][0]
        if arch == "MistralForCausalLM" and cw.get("sliding_window", 4096) is None:
            arch = "LlamaForCausalLM"
        window = cw.get("sliding_window", 4096) if arch == "MistralForCausalLM" else None
        if arch == "Qwen2ForCausalLM" and cw.get("use_sliding_window") and \
                cw.get("max_window_layers", 28) < cw["num_hidden_layers"]:
            window = cw["sliding_window"]  # some layer slides, and layer_types says which
        if cg["architectures"] != [arch] or cg.get("rope_scaling") != cw.get("rope_scaling") or \
                cg.get("sliding_window") != window:
            fail(f"config.json: {cg['architectures']} {cg.get('rope_scaling')} "
                 f"{cg.get('sliding_window')}, the fixture's {arch} {cw.get('rope_scaling')} "
                 f"{window}")
        for key in ("bos_token_id", "eos_token_id", "attention_bias"):
            if cg.get(key) != cw.get(key):
                fail(f"config.json: {key} {cg.get(key)}, the fixture's {cw.get(key)}")
        want, got = load_folder(args.against), load_folder(args.export)
        want.pop("lm_head.weight", None) if "lm_head.weight" not in got else None
        if set(want) != set(got):
            fail(f"tensor names differ: {sorted(set(want) ^ set(got))}")
        for name, (_, shape, values) in want.items():
            if args.bf16:
                values = [to_bf16(v) for v in values]
            if got[name][1] != shape:
                fail(f"{name}: shape {got[name][1]} != {shape}")
            bad = [i for i, (x, y) in enumerate(zip(values, got[name][2])) if not same(x, y)]
            if bad:
                i = bad[0]
                fail(f"{name}: element {i}: {got[name][2][i]!r} != {values[i]!r}")
    print(f"ok: {n_tensors} tensors in {n_shards} shards" + (", values exact" if args.against else ""))


if __name__ == "__main__":
    main()
