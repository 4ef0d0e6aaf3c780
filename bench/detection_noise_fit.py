#!/usr/bin/env python3
"""Fits detection_bench's noise model to real per-call times: runs the C++ example with N ranks over
Gloo (as tests/integration/ranks.py launches them) with a trace directory, decodes the per-step op
kind times from the traces' steps table and prints the body and preemption parameters.

    .venv/bin/python bench/detection_noise_fit.py build/examples/train_transformer --ranks 2
    .venv/bin/python bench/detection_noise_fit.py --trace DIR    # traces already written

The model (bench/DetectionBench.cpp's header): per op call, a lognormal body around the cell's
median (sigma = q50 - q16 of log time per cell, the lower half, which preemption leaves alone);
preemption hits at a rate lambda per second of the op's own time (a hit: a call above 2x its cell's
median and 0.5 ms above it; lambda = hits / summed median time of the calls); the extra time of a
hit above 3 ms Pareto (maximum-likelihood alpha).
"""
import argparse
import math
import os
import sqlite3
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

NUM_KINDS = 11  # core/include/attnscope/core/OpKind.h


def decode_value(code):
    """trace/src/TraceFormat.cpp: decodeValue (1024 codes per octave)."""
    return 0.0 if code == 0 else 2.0 ** ((code - 1) / 1024.0)


def decode_calls(blob):
    """One step's calls as (layer, phase, calls, ns, {kind: ns}); TraceFormat.cpp's encodeCalls."""
    pos = 0

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while True:
            byte = blob[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def u16():
        nonlocal pos
        value = blob[pos] | (blob[pos + 1] << 8)
        pos += 2
        return value

    out = []
    for _ in range(varint()):
        key, calls = varint(), varint()
        ns = decode_value(u16())
        pos += 3  # bytes and peak
        mask = u16()
        kinds = {}
        for k in range(NUM_KINDS):
            if mask & (1 << k):
                kinds[k] = decode_value(u16())
                pos += 3
        out.append((key >> 2, key & 3, calls, ns, kinds))
    if pos != len(blob):
        raise ValueError(f"step blob: {len(blob) - pos} trailing bytes")
    return out


def cell_series(path):
    """{(layer, phase, kind): [ns per call, one per step]}; kind -1 is the whole call."""
    series = {}
    with sqlite3.connect(path) as db:
        for (data,) in db.execute("SELECT data FROM steps ORDER BY step"):
            for layer, phase, calls, ns, kinds in decode_calls(bytes(data)):
                series.setdefault((layer, phase, -1), []).append(ns / calls)
                for k, v in kinds.items():
                    series.setdefault((layer, phase, k), []).append(v / calls)
    return series


def fit(paths):
    sigmas, excess = [], []
    hits = op_seconds = calls = call_hits = 0
    for path in paths:
        for key, values in cell_series(path).items():
            med = statistics.median(values)
            hit = [v - med for v in values if v > 2 * med and v - med > 0.5e6]
            if key[2] == -1:
                calls += len(values)
                call_hits += len(hit)
                continue
            logs = sorted(math.log(v) for v in values if v > 0)
            sigmas.append(logs[len(logs) // 2] - logs[int(0.16 * len(logs))])
            hits += len(hit)
            op_seconds += med * len(values) * 1e-9
            excess += hit
    if not sigmas or not excess:
        raise SystemExit("no op kind times or no preemption hits in the traces")
    sigmas.sort()
    excess.sort()
    tail = [e for e in excess if e >= 3e6]
    alpha = len(tail) / sum(math.log(e / 3e6) for e in tail) if tail else float("nan")
    q = lambda v, f: v[int(f * (len(v) - 1))]  # noqa: E731
    print(f"cells {len(sigmas)}: body sigma median {q(sigmas, .5):.3f} "
          f"(quartiles {q(sigmas, .25):.3f}-{q(sigmas, .75):.3f})")
    print(f"op-call hits {hits}: lambda {hits / op_seconds:.0f} per second of op time; "
          f"whole calls hit {call_hits / calls:.3f}")
    print(f"extra time of a hit: median {q(excess, .5) / 1e6:.1f} ms, 90% {q(excess, .9) / 1e6:.1f} ms, "
          f"max {excess[-1] / 1e6:.1f} ms; above 3 ms ({len(tail)} of {len(excess)}) Pareto alpha {alpha:.2f}")


def run_example(example, ranks, duration, tmp):
    from ranks import rank_env, spawn_ranks, wait_all  # tests/integration/ranks.py
    env = rank_env(tmp, 1.0, "warn", ATTNSCOPE_TRACE_DIR=os.path.join(tmp, "trace"))
    args = ["--layers", "4", "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "8",
            "--threads", "1", "--quiet", "--steps", "100000000", "--duration-s", str(duration)]
    codes = wait_all(spawn_ranks(example, ranks, env, args, tmp), duration + 120)
    if codes != [0] * ranks:
        raise SystemExit(f"example exit codes {codes} (logs in {tmp})")
    return os.path.join(tmp, "trace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", nargs="?", help="build/examples/train_transformer")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=20)
    ap.add_argument("--trace", help="fit the rank-*.sqlite files of this directory instead")
    a = ap.parse_args()
    if a.trace is None and a.example is None:
        ap.error("give the example binary or --trace DIR")
    with tempfile.TemporaryDirectory() as tmp:
        trace = a.trace or run_example(a.example, a.ranks, a.duration_s, tmp)
        paths = sorted(os.path.join(trace, f) for f in os.listdir(trace) if f.endswith(".sqlite"))
        if not paths:
            raise SystemExit(f"no rank-*.sqlite in {trace}")
        fit(paths)


if __name__ == "__main__":
    main()
