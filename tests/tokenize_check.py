#!/usr/bin/env python3
"""mt-tokenize against the Hugging Face tokenizers library, token for token.

usage: tokenize_check.py MT_TOKENIZE SOURCE_DIR SCRATCH_DIR
Trains two small byte-level BPE tokenizers on data/tinyshakespeare.txt at test time
(vocab 2000, plus "<|endoftext|>"): GPT-2 style (ByteLevel pre-tokenizer with its regex) and
Llama-3 style (Split(Regex) + ByteLevel(use_regex=false), ignore_merges). For each:
  - the whole text plus tricky strings as one document (text mode; long enough that
    mt-tokenize encodes it in several pieces) equals tokenizers' encode;
  - JSONL documents with --eot equal the encodings joined by the end-of-text id, split into
    shards of --shard-tokens, each with a valid MTCTOKS1 header (uint16, count, size);
  - variants made by editing the saved JSON: ByteLevel add_prefix_space (GPT-2 style), and
    Qwen2 style (NFC normalizer, its Split pattern) with --assume-nfc, on the tricky strings;
  - a tokenizer with an added token id above 65535 gives uint32 shards.
Exits 77 (skipped) when tokenizers cannot be imported.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import time

try:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
except ImportError:
    print("SKIPPED: the Python package tokenizers is not installed")
    sys.exit(77)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TRICKY = [
    "I'm sure you'll see they've done it; she'd said we're fine. DON'T SHOUT, It'S ok",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1,000,000 2024-05-01",
    "naïve café 東京 Zürich Ελληνικά русский עברית العربية",
    "emoji 😀👍🏽 👨‍👩‍👧 ✨ and symbols ©®™ ½ ∑∫",
    "runs   of    spaces\n\n\n  and\t\ttabs \r\n trailing   \n",
    "special <|endoftext|> inside<|endoftext|>text <|endoftext|>",
    "    leading spaces and a final space ",
    "",
    "x",
]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def train(kind, text_path, vocab_size=2000, specials=("<|endoftext|>",)):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([text_path], trainer)
    return tok


def read_shards(prefix):
    folder, base = os.path.split(prefix)
    names = sorted(n for n in os.listdir(folder) if n.startswith(base + "_") and n.endswith(".bin"))
    shards = []
    for n in names:
        blob = open(os.path.join(folder, n), "rb").read()
        magic, version, width, count = struct.unpack("<8sIIQ", blob[:24])
        check(magic == b"MTCTOKS1" and version == 1, f"{n}: header {magic} {version}")
        check(blob[24:256] == bytes(232), f"{n}: header padding not zero")
        check(len(blob) == 256 + count * width, f"{n}: size {len(blob)} != 256 + {count}x{width}")
        fmt = "<%d%s" % (count, "H" if width == 2 else "I")
        shards.append((width, list(struct.unpack(fmt, blob[256:256 + count * width]))))
    check(not [n for n in os.listdir(folder) if ".tmp." in n], "temporary files left behind")
    return shards


def run(mt, args):
    t0 = time.time()
    r = subprocess.run([mt, "-q"] + args, capture_output=True, text=True)
    check(r.returncode == 0, f"mt-tokenize {args} failed: {r.stderr.strip()}")
    return time.time() - t0


def compare(name, got, want):
    if got == want:
        return True
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), None)
    i = min(len(got), len(want)) if i is None else i
    check(False, f"{name}: {len(got)} tokens vs {len(want)} from tokenizers; first difference at "
                 f"{i}: {got[i:i + 8]} vs {want[i:i + 8]}")
    return False


def check_kind(mt, kind, text_path, scratch):
    tok = train(kind, text_path)
    tj = os.path.join(scratch, f"{kind}.json")
    tok.save(tj)
    eot = tok.token_to_id("<|endoftext|>")
    text = "\n".join(TRICKY) + open(text_path, encoding="utf-8").read() * 2 + "\n".join(TRICKY)
    doc = os.path.join(scratch, f"{kind}-doc.txt")
    open(doc, "w", encoding="utf-8", newline="").write(text)
    out = os.path.join(scratch, f"{kind}-text")
    secs = run(mt, ["-t", tj, "-o", out, doc])
    shards = read_shards(out)
    check(len(shards) == 1 and shards[0][0] == 2, f"{kind} text: {len(shards)} shards")
    want = tok.encode(text, add_special_tokens=False).ids
    if compare(f"{kind} text", shards[0][1] if shards else [], want):
        print(f"{kind}: {len(want)} tokens match; {len(text.encode()) / secs / 1e6:.2f} MB/s "
              f"({secs:.2f}s for {len(text.encode()) / 1e6:.1f} MB, with start-up)")

    docs = TRICKY + [line for line in open(text_path, encoding="utf-8").read().split("\n\n")[:300]]
    jl = os.path.join(scratch, f"{kind}.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": 1, "text": d}) + "\n")
    out = os.path.join(scratch, f"{kind}-jsonl")
    run(mt, ["-t", tj, "-o", out, "--jsonl", "--field", "text", "--eot", "<|endoftext|>",
             "--shard-tokens", "1000", jl])
    want = []
    for d in docs:
        want += tok.encode(d, add_special_tokens=False).ids + [eot]
    shards = read_shards(out)
    check(len(shards) == (len(want) + 999) // 1000, f"{kind} jsonl: {len(shards)} shards "
          f"for {len(want)} tokens")
    check(all(len(s[1]) == 1000 for s in shards[:-1]), f"{kind} jsonl: shard sizes")
    compare(f"{kind} jsonl", [t for s in shards for t in s[1]], want)
    return tj


QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def check_variant(mt, name, tj, edit, scratch, extra=()):
    j = json.load(open(tj, encoding="utf-8"))
    edit(j)
    path = os.path.join(scratch, f"{name}.json")
    json.dump(j, open(path, "w", encoding="utf-8"))
    tok = Tokenizer.from_file(path)
    jl = os.path.join(scratch, f"{name}.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in TRICKY:
            f.write(json.dumps({"text": d}) + "\n")
    out = os.path.join(scratch, f"{name}-out")
    run(mt, ["-t", path, "-o", out, "--jsonl", "--eot", "<|endoftext|>", *extra, jl])
    want = []
    for d in TRICKY:
        want += tok.encode(d, add_special_tokens=False).ids + [tok.token_to_id("<|endoftext|>")]
    shards = read_shards(out)
    if compare(name, [t for s in shards for t in s[1]], want):
        print(f"{name}: {len(want)} tokens match")


def prefix_space(j):
    j["pre_tokenizer"]["add_prefix_space"] = True


def qwen2(j):
    j["normalizer"] = {"type": "NFC"}
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2


def check_uint32(mt, tj, scratch):
    j = json.load(open(tj, encoding="utf-8"))
    j["model"]["vocab"]["<|big|>"] = 70000  # else tokenizers renumbers it to the next free id
    j["added_tokens"].append({"id": 70000, "content": "<|big|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True})
    big = os.path.join(scratch, "big.json")
    json.dump(j, open(big, "w", encoding="utf-8"))
    tok = Tokenizer.from_file(big)
    text = "to be<|big|> or not<|endoftext|>"
    doc = os.path.join(scratch, "big.txt")
    open(doc, "w", encoding="utf-8").write(text)
    out = os.path.join(scratch, "big-out")
    run(mt, ["-t", big, "-o", out, "--append-eos", doc])
    shards = read_shards(out)
    want = tok.encode(text, add_special_tokens=False).ids + [tok.token_to_id("<|endoftext|>")]
    check(len(shards) == 1 and shards[0][0] == 4, "uint32 shard expected")
    compare("uint32", shards[0][1] if shards else [], want)


def main():
    mt, src, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)  # no shards of an earlier run
    os.makedirs(scratch)
    text_path = os.path.join(src, "data", "tinyshakespeare.txt")
    tj = check_kind(mt, "gpt2", text_path, scratch)
    llama3 = check_kind(mt, "llama3", text_path, scratch)
    check_variant(mt, "prefix-space", tj, prefix_space, scratch)
    check_variant(mt, "qwen2", llama3, qwen2, scratch, ["--assume-nfc"])
    check_uint32(mt, tj, scratch)
    print("tokenize_check:", "FAILED" if failures else "all passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
