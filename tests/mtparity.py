"""What the transformers parity scripts (tests/hf_family_parity.py, bench/hf_train_parity.py)
share: runtime/io/data.c's batch windows mirrored in Python, a job through the real mtrun, and
the command line. Standard library only; the callers bring torch."""
import json
import os
import subprocess
import sys

M64 = (1 << 64) - 1


def splitmix64(x):  # runtime/base/base.h
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def batch(tokens, seed, step, micro, rows, seq, hi, split=0, lo=0):
    """dataset_batch: row r's window starts at lo + key % (hi - lo - seq); (inputs, targets)."""
    xs, ys = [], []
    for r in range(rows):
        key = splitmix64(seed ^ splitmix64((split << 62) ^ (step << 24) ^ (micro << 12) ^ r))
        o = lo + key % (hi - lo - seq)
        xs.append(tokens[o:o + seq])
        ys.append(tokens[o + 1:o + seq + 1])
    return xs, ys


def run_mtrun(build, cfg, out_dir):
    """mtrun -np 3 CFG: the metrics.jsonl records, or (None, why) when the backend is missing."""
    p = subprocess.run([os.path.join(build, "bin", "mtrun"), "-np", "3", cfg, "--out", out_dir],
                       capture_output=True, text=True, env=dict(os.environ, MT_TTY="0"),
                       timeout=600)
    text = p.stdout + p.stderr
    if p.returncode != 0:
        for why in ("no usable CUDA device", "has no CUDA backend"):
            if why in text:
                return None, why
        raise RuntimeError(f"mtrun exited {p.returncode}:\n{text[-3000:]}")
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f], None


def parse_args(doc, cuda_available):
    """BUILD_DIR [cpu|cuda|all] -> (build, backends); exits 77 for cuda without a GPU."""
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and
                                       sys.argv[2] not in ("cpu", "cuda", "all")):
        sys.exit(doc)
    want = sys.argv[2] if len(sys.argv) == 3 else "all"
    backends = ["cpu", "cuda"] if want == "all" else [want]
    if "cuda" in backends and not cuda_available:
        if want == "cuda":
            print("SKIPPED: no CUDA device for torch")
            sys.exit(77)
        backends.remove("cuda")
    return os.path.abspath(sys.argv[1]), backends
