#!/usr/bin/env python3
"""What the attach's module hooks cost per attention-module call, in instructions, on an
unsampled step: one small module (a Linear inside) called 1,000 times under callgrind with
no hooks (plain), with two empty Python hooks like the attach's (empty: torch's hooked
Module._call_impl path alone), and with the attach's own hooks while attnscope runs at
sample-every 1000000 past its first step (attach). docs/PERFORMANCE.md has the figures.

    for v in plain empty attach; do
      PYTHONPATH=build/python valgrind --tool=callgrind --callgrind-out-file=/tmp/hooks.$v.%p \\
        .venv/bin/python bench/instr_hooks.py $v
    done
    # instructions per call: the dump ending in .1, its summary line / 1000
"""
import os
import subprocess
import sys

import torch
import torch.nn as nn

CALLS = 1000


class Attention(nn.Module):  # the class name makes it a layer under the attach's rule
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


def main():
    variant = sys.argv[1] if len(sys.argv) > 1 else ""
    if variant not in ("plain", "empty", "attach"):
        sys.exit("instr_hooks.py: the variant is one of plain, empty, attach")
    module = Attention()
    x = torch.zeros(1, 4, requires_grad=True)
    if variant == "empty":
        module.register_forward_pre_hook(lambda m, args: None)
        module.register_forward_hook(lambda m, args, out: None, always_call=True)
    if variant == "attach":
        import attnscope
        from attnscope import _attach
        _attach.install()
        attnscope.start(sample_every=1000000, port=0, log_level="error", peak_flops=3e10, peak_bandwidth=1e10)
    for _ in range(50):  # discovery (attach), allocator and dispatcher warm-up
        module(x)
    if variant == "attach":
        _attach.attachment().end_discovery()  # as after the third optimizer step
        attnscope.step()  # step 1 on: unsampled
    subprocess.run(["callgrind_control", "-z", str(os.getpid())], capture_output=True)
    for _ in range(CALLS):
        module(x)
    subprocess.run(["callgrind_control", "-d", str(os.getpid())], capture_output=True)
    if variant == "attach":
        summary = attnscope.summary()
        attnscope.stop()
        if [l["name"] for l in summary["layers"]] != ["Attention"]:
            sys.exit(f"instr_hooks.py: the attach did not find the module: {summary['layers']}")
    print("done", variant)


if __name__ == "__main__":
    main()
