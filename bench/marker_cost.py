#!/usr/bin/env python3
"""The cost of one layer's forward markers in compiled code (docs/PERFORMANCE.md#torchcompile): a
layer_enter + layer_exit pair on a (4, 32, 64) tensor as Inductor's wrapper calls them (grad
disabled, through the ops' overloads as Inductor's wrapper calls them), with attnscope recording at sample-every 1, with attnscope stopped, and the two copies
the markers make alone. One thread; medians of 15 rounds of 500 pairs.

    PYTHONPATH=build/python .venv/bin/python bench/marker_cost.py
"""
import os
import statistics
import time

import torch

os.environ.setdefault("ATTNSCOPE_LOG_LEVEL", "warn")
from attnscope import _attach  # noqa: E402

import attnscope  # noqa: E402


def per_pair(fn, n=500):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main():
    _attach.install()  # the markers' autograd formulas
    torch.set_num_threads(1)
    x = torch.randn(4, 32, 64)

    def markers():
        (y,) = torch.ops.attnscope.layer_enter.default([x], "blocks.0.attn")
        torch.ops.attnscope.layer_exit.default([y], "blocks.0.attn", True)

    def copies():
        x.clone().clone()
    with torch.no_grad():
        attnscope.start(sample_every=1)
        per_pair(markers, 200)
        recording = statistics.median(per_pair(markers) for _ in range(15))
        attnscope.stop()
        stopped = statistics.median(per_pair(markers) for _ in range(15))
        cloned = statistics.median(per_pair(copies) for _ in range(15))
    print(f"enter+exit pair: recording {recording * 1e6:.2f} us, attnscope stopped {stopped * 1e6:.2f} us, "
          f"the two copies alone {cloned * 1e6:.2f} us")


if __name__ == "__main__":
    main()
