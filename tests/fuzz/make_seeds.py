#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus: small safetensors files and token shards
(the fixtures of the other tests are megabytes, and a seed should be a few hundred bytes so
that mutations reach the header), and a train.cfg on synthetic data, which passes every check
mt_config_load makes from any folder. The other seeds are copies (tests/fuzz/README.md).

usage: make_seeds.py CORPUS_DIR"""
import json
import os
import struct
import sys


def safetensors(path, tensors, meta=None, pad=0):
    """tensors: (name, dtype, shape); data of zeros laid out back to back."""
    width = {"F32": 4, "F16": 2, "BF16": 2}
    header, off = {}, 0
    for name, dtype, shape in tensors:
        n = width[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode() + b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(off))


def shard_ours(path, width, tokens):
    head = b"MTCTOKS1" + struct.pack("<IIQ", 1, width, len(tokens))
    fmt = "<%d%s" % (len(tokens), "H" if width == 2 else "I")
    with open(path, "wb") as f:
        f.write(head + bytes(256 - len(head)) + struct.pack(fmt, *tokens))


def shard_masked(path, width, tokens, mask):
    """MTCTOKS1 version 2 with flag bit 0: the target mask, a bit per token, after the tokens."""
    head = b"MTCTOKS1" + struct.pack("<IIQI", 2, width, len(tokens), 1)
    fmt = "<%d%s" % (len(tokens), "H" if width == 2 else "I")
    bits = bytearray((len(tokens) + 7) // 8)
    for i, m in enumerate(mask):
        bits[i >> 3] |= m << (i & 7)
    with open(path, "wb") as f:
        f.write(head + bytes(256 - len(head)) + struct.pack(fmt, *tokens) + bytes(bits))


def shard_llmc(path, magic, version, tokens):
    head = struct.pack("<3i", magic, version, len(tokens)) + bytes(1024 - 12)
    fmt = "<%d%s" % (len(tokens), "H" if magic == 20240520 else "I")
    with open(path, "wb") as f:
        f.write(head + struct.pack(fmt, *tokens))


CFG = """# a tiny model on synthetic tokens: every check passes from any folder
model = { dim = 64; layers = 2; heads = 4; kv_heads = 2; ffn_dim = 160; vocab = 256; };
data = { format = "synthetic"; };
batch = { micro_batch = 2; micro_batches = 2; seq_len = 32; };
optimizer = { lr = 2e-3; warmup_steps = 2; };
steps = 4;
backend = "cpu";
"""


def main(out):
    st = os.path.join(out, "safetensors")
    os.makedirs(st, exist_ok=True)
    small = [("model.embed_tokens.weight", "BF16", [4, 8]), ("model.norm.weight", "F32", [8]),
             ("lm_head.weight", "F16", [4, 8])]
    safetensors(os.path.join(st, "three.safetensors"), small, {"format": "pt"})
    safetensors(os.path.join(st, "padded.safetensors"), small[:2], pad=7)
    safetensors(os.path.join(st, "empty_tensor.safetensors"), [("model.norm.weight", "F32", [0])])
    sh = os.path.join(out, "shard")
    os.makedirs(sh, exist_ok=True)
    shard_ours(os.path.join(sh, "ours_u16.bin"), 2, list(range(16)))
    shard_ours(os.path.join(sh, "ours_u32.bin"), 4, [0, 70000, 5, 128255])
    shard_masked(os.path.join(sh, "ours_masked_u16.bin"), 2, list(range(11)),
                 [0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0])
    shard_masked(os.path.join(sh, "ours_masked_u32.bin"), 4, [0, 70000, 5], [1, 0, 1])
    shard_llmc(os.path.join(sh, "llmc_gpt2.bin"), 20240520, 1, [50256, 1, 2, 3])
    shard_llmc(os.path.join(sh, "llmc_llama3.bin"), 20240801, 7, [128000, 1, 2])
    chat = os.path.join(out, "chat")
    os.makedirs(chat, exist_ok=True)
    for name, messages in [
            ("turns", [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "  Hi\n"},
                       {"role": "assistant", "content": "Hello. <|im_end|> caf\u00e9"}]),
            ("mistral", [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""},
                         {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]),
            ("bad_role", [{"role": "tool", "content": "x"}])]:
        with open(os.path.join(chat, name + ".jsonl"), "w") as f:
            f.write(json.dumps({"messages": messages}) + "\n")
    cfg = os.path.join(out, "train_cfg")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "synthetic.cfg"), "w") as f:
        f.write(CFG)


if __name__ == "__main__":
    main(sys.argv[1])
