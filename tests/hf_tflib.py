"""What the hf_*_transformers.py tests share: PASS/FAIL lines (FAILED collects the failures),
test_hf's import-export round trip, two models' tensors compared, an export's tensors read.
Import it after torch and transformers were found (the tests skip without them)."""
import json
import os
import subprocess

import torch
from safetensors.torch import load_file

FAILED = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def roundtrip(test_hf, src, out, dtype="float32"):
    """test_hf's import of src and export to out in dtype, checked bitwise by test_hf."""
    r = subprocess.run([test_hf, "roundtrip", src, out, "60000", dtype], capture_output=True,
                       text=True)
    check(r.returncode == 0, f"test_hf roundtrip {os.path.basename(src)} ({dtype}): "
          f"{(r.stdout + r.stderr).strip()}")


def same_state(a, b, rounded=False, kept=lambda name: False):
    """'' when b's tensors are a's (rounded to bf16 with rounded, but for those kept(name) says
    an export keeps as they are), else the first that is not."""
    sa, sb = a.state_dict(), b.state_dict()
    if set(sa) != set(sb):
        return f"names differ: {sorted(set(sa) ^ set(sb))[:6]}"
    for k in sa:
        x = sa[k].to(torch.bfloat16).float() if rounded and not kept(k) else sa[k].float()
        if not torch.equal(x, sb[k].float()):
            return f"{k} differs"
    return ""


def exported_tensors(out):
    """Every tensor of the sharded export in out, by name."""
    ix = json.load(open(os.path.join(out, "model.safetensors.index.json")))["weight_map"]
    t = {}
    for f in set(ix.values()):
        t.update(load_file(os.path.join(out, f)))
    return t
