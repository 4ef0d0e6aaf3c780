#!/usr/bin/env python3
"""The zero-code attach's cost in instructions: one variant's training steps under callgrind.
bench/instr_attach runs the variants side by side and prints the ratios (docs/PERFORMANCE.md).

    valgrind --tool=callgrind python3 bench/instr_attach.py VARIANT --model MODEL [--steps N]

VARIANT: off (no attnscope), attnscope (the attach as attnscope-run installs it, then
attnscope.start with configured roofline ceilings so that no calibration runs inside the count and
no metrics port; backward on hooks on each call's own autograd nodes), callback (the same, but
every call closed without its results, as a scope closed by its destructor is: backward through
the global RecordFunction callback on every node, the path before node hooks), profiler (torch.profiler, CPU, profile_memory=True, around the counted steps).
Ablations, each the attnscope variant less one part, to find where its cost goes:
  python      the attach's Python alone: its module hooks run, attnscope's scope calls are no-ops
              and attnscope never starts (no session, no RecordFunction callback)
  noroofline  attnscope with ATTNSCOPE_ROOFLINE=0 (no input shapes read)
  nomemory    attnscope with ATTNSCOPE_MEMORY=0 (no allocation attribution)
Three steps warm up (allocator, autograd, discovery, whose global module hook ends at the third
optimizer step), callgrind's counters are zeroed
(callgrind_control -z), N steps run, and the counters are dumped (-d): the dump ending in .1 holds
exactly those steps. For profiler a second dump (.2) holds what the profiler spends when it stops.
Models (one thread, built from configs, nothing downloaded):
  encoder  torch.nn.TransformerEncoder, 2 layers, d_model 64, 4 heads, seq 32, batch 4 (tiny ops:
           the worst case for a per-op observer)
  llama    transformers LlamaForCausalLM, 2 layers, hidden 128, 4 heads (2 KV), seq 64, batch 4, sdpa
  gpt      the hand-written GPT of the discovery tests (manual softmax), 2 layers, d 128, 4 heads,
           seq 64, batch 4
Small because the wheel's MKL sgemm under callgrind is slow: a model of d 256, seq 128 or more,
batch 8 takes over ten minutes per training step. Their wall clock is bench/discovery_overhead.py's.

--compile: the model is torch.compile'd (Inductor, one thread; off has no attach, so no markers).
Compiling under callgrind would take most of an hour, so bench/instr_attach first runs each
variant once natively with --warm (it compiles, fills Inductor's caches in TORCHINDUCTOR_CACHE_DIR
and prints Inductor's generated kernel count), then under valgrind with instrumentation off until
the warm-up is over (--instr-atstart=no; the script switches it on with callgrind_control -i on):
the compilation there is a cache hit and is not counted. ATEN_CPU_CAPABILITY=avx2 and
TORCHINDUCTOR_CPP_MARCH=haswell in both, so that Inductor's kernels use no AVX-512, which valgrind
does not run.
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def build(model, seq, batch):
    vocab = 512
    if model == "encoder":
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.1, batch_first=True)
        net = nn.TransformerEncoder(layer, num_layers=2)
        x = torch.randn(4, 32, 64)
        return net, lambda m: m(x).pow(2).mean()
    tokens = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))
    if model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=seq)
        net = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
        return net, lambda m: m(input_ids=tokens, labels=tokens).loss
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
    import discovery_models as dm
    dm.SEQ, dm.VOCAB = seq, vocab
    net = dm.GPT(sdpa=False, d=128, heads=4, layers=2)
    return net, lambda m: F.cross_entropy(m(tokens).reshape(-1, vocab), tokens.reshape(-1))


class FakeScopes:
    """The extension module with its scope calls made no-ops (the python variant): what is left is
    the attach's own Python (module hooks, their arguments, the results' `_cdata`)."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name in ("enter_scope", "exit_scope", "enter_fused", "exit_fused"):
            return lambda *args, **kwargs: None
        return getattr(self._real, name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", help="off, attnscope, callback, profiler, python, noroofline or nomemory; NAME@N for "
                                   "sample-every N")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (see above)")
    p.add_argument("--warm", action="store_true", help="with --compile: compile natively, print the kernel count")
    p.add_argument("--model", choices=("encoder", "llama", "gpt"), default="encoder")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--sample-every", type=int, default=1)
    a = p.parse_args()
    a.variant, _, every = a.variant.partition("@")
    if every:
        a.sample_every = int(every)
    allowed = ("off", "attnscope", "callback", "profiler", "python", "noroofline", "nomemory")
    if a.variant not in allowed:
        p.error(f"variant {a.variant!r}; allowed: {', '.join(allowed)}, each optionally @N (sample-every N)")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    observed = a.variant not in ("off", "profiler")
    if observed:
        import attnscope
        from attnscope import _attach
        if a.variant == "callback":
            _attach._results = lambda output: None  # no results: the callback path
        if a.variant == "python":  # attnscope never starts: no session, no callbacks, no allocator
            _attach._attnscope = FakeScopes(_attach._attnscope)
        _attach.install()  # before the model is built, as sitecustomize does under attnscope-run
        if a.variant == "python":
            _attach.attachment().ensure_started = lambda: None
        # Configured ceilings: no calibration inside the count (and none to set without a roofline).
        parts = {"roofline": False} if a.variant == "noroofline" else {"peak_flops": 3e10, "peak_bandwidth": 1e10}
        if a.variant == "nomemory":
            parts["memory"] = False
        if a.variant != "python":
            attnscope.start(sample_every=a.sample_every, port=0, log_level="error", **parts)
    net, loss_of = build(a.model, a.seq, a.batch)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    run = net
    if a.compile:
        import torch._inductor.config as inductor_config
        inductor_config.compile_threads = 1  # no compile worker processes
        run = torch.compile(net)

    def step():
        loss = loss_of(run)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def ctl(*flags):
        subprocess.run(["callgrind_control", *flags, str(os.getpid())], capture_output=True)

    for _ in range(3):
        step()
    if a.compile:
        from torch._dynamo.utils import counters
        from torch._inductor import metrics
        graphs = dict(counters["stats"])
        print("compiled:", "graphs", graphs.get("unique_graphs", 0), "breaks", sum(counters["graph_break"].values()),
              "kernels generated", metrics.generated_kernel_count, "fx graph cache hits",
              counters["inductor"].get("fxgraph_cache_hit", 0), "misses", counters["inductor"].get("fxgraph_cache_miss", 0))
        if a.warm:
            return
        ctl("-i", "on")  # valgrind ran uninstrumented through start-up and compilation
    if a.variant == "profiler":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
            ctl("-z")
            for _ in range(a.steps):
                step()
            ctl("-d")
        ctl("-d")
    else:
        ctl("-z")
        for _ in range(a.steps):
            step()
        ctl("-d")
    if a.compile and dict(counters["stats"]) != graphs:
        print("recompiled inside the count:", graphs, dict(counters["stats"]))
    if observed and a.variant != "python":
        summary = attnscope.summary()
        layers = {l["name"]: {phase: p["calls"] for phase, p in l["phases"].items()} for l in summary["layers"]}
        attnscope.stop()
        print("layers (calls per phase, warm-up included)", layers, "backward", summary["discovery"]["backward"])
    print("done", a.variant, a.model)


if __name__ == "__main__":
    main()
