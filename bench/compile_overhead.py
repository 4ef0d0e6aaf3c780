#!/usr/bin/env python3
"""What attnscope costs a torch.compile'd model (docs/PERFORMANCE.md#torchcompile), one thread,
Inductor on the CPU. Each variant runs in its own process (two instances of one model class in one
process share Dynamo's cache entries, so they cannot alternate there): `plain` (compiled, no
attnscope), `marked` (compiled under the attach: the markers), `eager` (under the attach, not
compiled). The driver alternates the processes in a seeded random order for --processes rounds and
reports

- the ratio of median step times (marked / plain, pooled over the processes) with a bootstrap 95%
  interval;
- the first steps' wall time (compilation; Inductor's FX graph cache off, so each really compiles)
  and Inductor's generated kernel count with and without the markers (the fusion they cost);
- the share of the step that attnscope attributes to attention (every layer's forward and backward
  over the step time), compiled against eager; and attnscope's own accounting of its time.

    PYTHONPATH=build/python .venv/bin/python bench/compile_overhead.py --model gpt_manual --processes 3
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead_python import bootstrap  # noqa: E402


def layer_seconds(summary):
    """Per layer, its calls so far, forward, backward and recompute."""
    return {layer["name"]: sum(p["call"]["total_seconds"] for p in layer["phases"].values())
            for layer in summary["layers"]}


def run_variant(a):
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor import metrics
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
    import discovery_models as dm
    torch.set_num_threads(1)
    inductor_config.fx_graph_cache = False
    if a.variant != "plain":
        from attnscope import _attach
        _attach.install()
    import attnscope
    torch.manual_seed(0)
    model, batch_of, loss_of = dm.build(a.model)
    run = model if a.variant == "eager" else torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)

    def step():
        t0 = time.perf_counter()
        loss = loss_of(run, batch_of(gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0
    first = [step() for _ in range(3)]  # the forward graph compiles at the first call, backward at the first backward
    s0 = attnscope.summary() if attnscope.is_running() else None
    times = [step() for _ in range(a.steps)]
    out = {"first_s": sum(first), "times": times, "kernels": metrics.generated_kernel_count}
    if s0 is not None:
        s1 = attnscope.summary()
        before, after = layer_seconds(s0), layer_seconds(s1)
        out["layers"] = {name: (after[name] - before.get(name, 0.0)) / sum(times) for name in after}
        out["share"] = sum(out["layers"].values())
        out["compile_seconds"] = s1["discovery"]["compile_seconds"]
        out["own_share"] = (s1["run"]["overhead_seconds"] - s0["run"]["overhead_seconds"]) / sum(times)
    print("RESULT " + json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt_manual", choices=("gpt_manual", "gpt_sdpa", "llama_sdpa", "llama_eager"))
    p.add_argument("--processes", type=int, default=3, help="processes per variant")
    p.add_argument("--steps", type=int, default=60, help="timed steps per process")
    p.add_argument("--variant", choices=("plain", "marked", "eager"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.variant:
        return run_variant(a)
    rng = random.Random(0)
    results = {v: [] for v in ("plain", "marked", "eager")}
    env = dict(os.environ, OMP_NUM_THREADS="1", ATTNSCOPE_LOG_LEVEL="warn", ATTNSCOPE_SAMPLE_EVERY="1")
    for _ in range(a.processes):
        order = list(results)
        rng.shuffle(order)
        for v in order:
            r = subprocess.run([sys.executable, __file__, "--model", a.model, "--steps", str(a.steps), "--variant", v],
                               env=env, capture_output=True, text=True, timeout=1200)
            line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                sys.exit(f"{v}: exit {r.returncode}: {r.stderr[-2000:]}")
            results[v].append(json.loads(line[0][7:]))
    pooled = {v: [t for r in rs for t in r["times"]] for v, rs in results.items()}
    ratio = statistics.median(pooled["marked"]) / statistics.median(pooled["plain"])
    low, high = bootstrap(pooled["plain"], pooled["marked"], random.Random(1))
    first = {v: statistics.median(r["first_s"] for r in rs) for v, rs in results.items()}
    print(f"model {a.model}, {a.processes} processes x {a.steps} timed steps per variant")
    print(f"step median: plain {statistics.median(pooled['plain']) * 1e3:.3f} ms, marked "
          f"{statistics.median(pooled['marked']) * 1e3:.3f} ms: ratio {ratio:.4f} [{low:.4f}, {high:.4f}]; eager "
          f"{statistics.median(pooled['eager']) * 1e3:.3f} ms")
    firsts = {v: [r["first_s"] for r in rs] for v, rs in results.items()}
    low_c, high_c = bootstrap(firsts["plain"], firsts["marked"], random.Random(2))
    print(f"first 3 steps (compilation), median of processes: plain {first['plain']:.2f} s "
          f"{[round(x, 2) for x in firsts['plain']]}, marked {first['marked']:.2f} s {[round(x, 2) for x in firsts['marked']]} "
          f"(ratio {first['marked'] / first['plain']:.3f} [{low_c:.3f}, {high_c:.3f}]); attnscope's compile_seconds "
          f"{[round(r['compile_seconds'], 2) for r in results['marked']]}")
    print(f"Inductor generated kernels: plain {[r['kernels'] for r in results['plain']]}, marked "
          f"{[r['kernels'] for r in results['marked']]}")
    print(f"attnscope's own time (its accounting) over the step: marked "
          f"{[round(r['own_share'], 5) for r in results['marked']]}, eager {[round(r['own_share'], 5) for r in results['eager']]}")
    print(f"attention share of the step: compiled {[round(r['share'], 3) for r in results['marked']]}, eager "
          f"{[round(r['share'], 3) for r in results['eager']]}")
    for name in results["marked"][0]["layers"]:
        compiled = [r["layers"][name] for r in results["marked"]]
        eager = [r["layers"][name] for r in results["eager"]]
        print(f"  {name}: compiled {[round(x, 3) for x in compiled]} (median {statistics.median(compiled):.3f}), "
              f"eager {[round(x, 3) for x in eager]} (median {statistics.median(eager):.3f}), difference "
              f"{statistics.median(compiled) - statistics.median(eager):+.3f}")


if __name__ == "__main__":
    main()
