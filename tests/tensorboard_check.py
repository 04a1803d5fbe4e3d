#!/usr/bin/env python3
"""A run folder's TensorBoard events hold the scalars of its metrics.jsonl.

  tensorboard_check.py RUN_DIR [--reader tensorboard|own]

--reader tensorboard (the default when the package imports): TensorBoard's own EventAccumulator
loads the folder as `tensorboard --logdir` would. --reader own: an independent reading of the
format written here from its public description (TFRecord frames with masked CRC-32C, Event and
Summary protobufs), for machines without the package. Either way every step's train/loss, lr,
grad_norm, tokens_per_s and tflops, and every eval/loss, must equal metrics.jsonl's as float32
(for a resumed run, the last record of each step), and perf and memory scalars must be there.
Exit 0 when they do, 1 with the first difference, 77 when the reader asked for is missing.
"""
import glob
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field, wire type, value) of a protobuf message; value is bytes for lengths."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        yield f, wt, v


def own_reader(run):
    """{tag: {step: value}} from every event file of the folder, in file then record order."""
    out = {}
    files = sorted(glob.glob(os.path.join(run, "*tfevents*")))
    if not files:
        sys.exit(f"FAIL: no event file in {run}")
    for path in files:
        data = open(path, "rb").read()
        i, first = 0, True
        while i < len(data):
            head = data[i:i + 8]
            (n,) = struct.unpack("<Q", head)
            (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
            body = data[i + 12:i + 12 + n]
            (bcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
            if hcrc != masked(head) or bcrc != masked(body):
                sys.exit(f"FAIL: {path}: bad CRC at byte {i}")
            i += 16 + n
            step, version, values = 0, None, []
            for f, wt, v in fields(body):
                if f == 2:
                    step = v
                elif f == 3:
                    version = v.decode()
                elif f == 5:
                    for vf, _, val in fields(v):
                        if vf != 1:
                            continue
                        tag = simple = None
                        for ff, _, x in fields(val):
                            if ff == 1:
                                tag = x.decode()
                            elif ff == 2:
                                (simple,) = struct.unpack("<f", x)
                        values.append((tag, simple))
            if first and version != "brain.Event:2":
                sys.exit(f"FAIL: {path}: first event is not file_version brain.Event:2")
            first = False
            for tag, simple in values:
                out.setdefault(tag, {})[step] = simple
    return out


def tensorboard_reader(run):
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("SKIPPED: the tensorboard package is not installed")
        sys.exit(77)
    acc = event_accumulator.EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def main():
    run = sys.argv[1]
    reader = sys.argv[3] if len(sys.argv) > 3 else "tensorboard"
    got = own_reader(run) if reader == "own" else tensorboard_reader(run)
    want = {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        r = json.loads(line)
        if "loss" in r:
            for tag, key in (("train/loss", "loss"), ("train/lr", "lr"),
                             ("train/grad_norm", "grad_norm"),
                             ("perf/tokens_per_s", "tokens_per_s"), ("perf/tflops", "tflops")):
                if r[key] is not None:
                    want.setdefault(tag, {})[r["step"]] = r[key]
        elif "eval_loss" in r:
            want.setdefault("eval/loss", {})[r["step"]] = r["eval_loss"]
    for tag, steps in want.items():
        if tag not in got:
            sys.exit(f"FAIL: {reader} reader: no {tag} (has {sorted(got)})")
        for step, v in steps.items():
            g = got[tag].get(step)
            f32 = struct.unpack("<f", struct.pack("<f", v))[0]
            # jsonl rounds tokens/s and TFLOP/s to print; the event holds the float32 value
            if g is None or (g != f32 and abs(g - v) > 1e-3 * abs(v) + 1e-4):
                sys.exit(f"FAIL: {reader} reader: {tag} at step {step}: {g}, metrics.jsonl {v}")
        extra = sorted(set(got[tag]) - set(steps))
        if extra:
            sys.exit(f"FAIL: {reader} reader: {tag} has steps {extra} that metrics.jsonl has not")
    for tag in ("perf/step_s", "perf/optimizer_wait", "perf/mfu"):
        if tag not in got:
            sys.exit(f"FAIL: {reader} reader: no {tag}")
    n = sum(len(v) for v in got.values())
    print(f"PASS: {reader} reader: {len(got)} tags, {n} points, equal to metrics.jsonl")


if __name__ == "__main__":
    main()
