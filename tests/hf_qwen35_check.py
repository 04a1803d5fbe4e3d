#!/usr/bin/env python3
"""An export of a Qwen3.5-family folder checked against its source with the standard library
only: every source tensor is in the export under the same name and shape (the hub's layout, the
fused and reshaped ones included), its values the source's decoded here (rounded to bf16 as
torch rounds with --bf16), except the carried ones (model.visual.*, mtp.*), which keep their
dtype and bytes; config.json names the source's class, and a VLM's keeps its top-level keys,
vision_config and the mRoPE and MTP keys of text_config; a text class's tensors that the
source nests under model.language_model. (as a VLM's) are the export's model.*.

usage: hf_qwen35_check.py EXPORT SOURCE [--bf16]
"""
import json
import os
import struct
import sys


def folder(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = (set(json.load(open(index))["weight_map"].values()) if os.path.exists(index)
             else {"model.safetensors"})
    out = {}
    for f in files:
        blob = open(os.path.join(d, f), "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        header.pop("__metadata__", None)
        for name, t in header.items():
            a, b = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], blob[8 + n + a:8 + n + b])
    return out


def values(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    bits = struct.unpack(f"<{len(raw) // 2}H", raw)
    return list(struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I",
                                                            *[b << 16 for b in bits])))


def to_bf16(x):
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", b))[0]


def main():
    out, src, bf16 = sys.argv[1], sys.argv[2], "--bf16" in sys.argv
    a, b = folder(src), folder(out)
    # a text class's tensors nested as a VLM's are exported as model.*
    vlm = "text_config" in json.load(open(os.path.join(src, "config.json")))
    nest = "model.language_model."
    if not vlm:
        a = {("model." + n[len(nest):] if n.startswith(nest) else n): v for n, v in a.items()}
    problems = [f"{n} missing" for n in a if n not in b] + [f"{n} extra" for n in b if n not in a]
    for name, (dt, shape, raw) in a.items():
        if name not in b:
            continue
        dt2, shape2, raw2 = b[name]
        if shape2 != shape:
            problems.append(f"{name}: shape {shape2}, source {shape}")
        elif name.startswith(("model.visual.", "mtp.")):
            if (dt2, raw2) != (dt, raw):
                problems.append(f"{name}: not carried byte for byte")
        else:
            want = [to_bf16(x) for x in values(dt, raw)] if bf16 else values(dt, raw)
            if values(dt2, raw2) != want:
                problems.append(f"{name}: values differ")
    ca, cb = json.load(open(os.path.join(src, "config.json"))), json.load(
        open(os.path.join(out, "config.json")))
    if ca["architectures"] != cb["architectures"]:
        problems.append(f"architectures {cb['architectures']}, source {ca['architectures']}")
    if "text_config" in ca:
        ta, tb = ca["text_config"], cb.get("text_config", {})
        for key in ("vision_config", "image_token_id", "model_type"):
            if ca[key] != cb.get(key):
                problems.append(f"config {key} not kept")
        for key in ("mtp_num_hidden_layers", "model_type", "layer_types"):
            if ta.get(key) != tb.get(key):
                problems.append(f"text_config {key} {tb.get(key)}, source {ta.get(key)}")
        for key in ("mrope_section", "mrope_interleaved", "partial_rotary_factor", "rope_theta"):
            if ta["rope_parameters"].get(key) != tb.get("rope_parameters", {}).get(key):
                problems.append(f"text_config rope_parameters.{key} not kept")
    if problems:
        sys.exit("; ".join(problems[:8]))
    print(f"{len(a)} tensors as the source's" + (" (bf16)" if bf16 else ""))


if __name__ == "__main__":
    main()
