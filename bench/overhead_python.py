#!/usr/bin/python3
"""Step-time overhead on the Python example's model (examples/train_transformer.py: nn.TransformerEncoder)
in one process: no observer; attnscope at sample-every 1; attnscope at a sparser rate; and
torch.profiler with profile_memory=True recording the same steps. Variants alternate in random
order within each round (one untimed step after every switch); the result is the ratio of median
step times with a bootstrap 95% interval. attnscope observes the MultiheadAttention modules the
way zero-code attach does (forward inside attnscope.attention(<module path>)).

    PYTHONPATH=build/python OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/overhead_python.py --rounds 30
"""
import argparse
import importlib.util
import os
import random
import statistics
import sys
import time

import torch

import attnscope

HERE = os.path.dirname(os.path.abspath(__file__))


def load_example():
    path = os.path.join(HERE, "..", "examples", "train_transformer.py")
    spec = importlib.util.spec_from_file_location("train_transformer_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bootstrap(a, b, rng, n=2000):
    ratios = sorted(statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
                    for _ in range(n))
    return ratios[int(n * 0.025)], ratios[int(n * 0.975)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=3, help="timed steps per variant and round")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--sparse-every", type=int, default=10, help="the sparser attnscope variant's rate")
    p.add_argument("--no-profiler", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    example = load_example()
    margs = argparse.Namespace(vocab=1000, d_model=a.d_model, heads=a.heads, layers=a.layers)
    torch.manual_seed(0)
    model = example.Model(margs)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    names = {m: n for n, m in model.named_modules() if isinstance(m, torch.nn.MultiheadAttention)}
    mha = torch.nn.MultiheadAttention
    plain_forward = mha.forward

    def observed_forward(self, *args, **kwargs):
        with attnscope.attention(names[self]):
            return plain_forward(self, *args, **kwargs)

    def train_step():
        tokens = torch.randint(0, 1000, (a.batch, a.seq), generator=gen)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1000), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    variants = [("no observer", None), ("attnscope sample-every 1", 1),
                (f"attnscope sample-every {a.sparse_every}", a.sparse_every)]
    if not a.no_profiler:
        variants.append(("torch.profiler, profile_memory", "profiler"))
    times = {name: [] for name, _ in variants}
    own = {name: [0.0, 0] for name, _ in variants}  # attnscope's own accounting: seconds, steps
    profiler_exit = []
    rng = random.Random(12345)
    for _ in range(3):
        train_step()
    for _ in range(a.rounds):
        order = list(variants)
        rng.shuffle(order)
        for name, kind in order:
            prof = None
            if isinstance(kind, int):
                attnscope.start(sample_every=kind, port=0, log_level="warn", aggregation="none")
                mha.forward = observed_forward
            elif kind == "profiler":
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
                prof.__enter__()
            train_step()  # untimed, after the switch
            if isinstance(kind, int):
                attnscope.step()
            # A sparse variant's block spans its period after the untimed (sampled) step 0, so that
            # exactly one timed step in `kind` is sampled, as in a long run.
            timed = kind if isinstance(kind, int) and kind > 1 else a.steps
            for _ in range(timed):
                t0 = time.perf_counter()
                train_step()
                if isinstance(kind, int):
                    attnscope.step()
                times[name].append(time.perf_counter() - t0)
            if isinstance(kind, int):
                mha.forward = plain_forward
                own[name][0] += attnscope.summary()["run"]["overhead_seconds"]
                own[name][1] += timed + 1
                attnscope.stop()
            elif prof is not None:
                t0 = time.perf_counter()
                prof.__exit__(None, None, None)
                profiler_exit.append((time.perf_counter() - t0) / (timed + 1))
    base = times[variants[0][0]]
    print(f"model: nn.TransformerEncoder, {a.layers} layers, d_model {a.d_model}, {a.heads} heads, seq {a.seq}, "
          f"batch {a.batch}, 1 thread; {a.rounds} rounds x {a.steps} timed steps per variant, random order")
    print(f"{'variant':<34} {'median step':>12} {'ratio':>8} {'overhead':>9}   95% interval (ratio)")
    overheads = {}
    for name, _ in variants:
        med = statistics.median(times[name])
        if times[name] is base:
            print(f"{name:<34} {med * 1e3:10.2f}ms {1:>8} {'-':>9}   -")
            continue
        lo, hi = bootstrap(base, times[name], rng)
        ratio = med / statistics.median(base)
        overheads[name] = ratio - 1
        line = f"{name:<34} {med * 1e3:10.2f}ms {ratio:8.4f} {100 * (ratio - 1):8.2f}%   {lo:.4f} .. {hi:.4f}"
        if own[name][1]:
            per_step = own[name][0] / own[name][1]
            line += f"   own accounting {per_step * 1e6:.1f} us/step = {100 * per_step / statistics.median(base):.3f}%"
        print(line)
    if profiler_exit:
        print(f"torch.profiler post-processing at exit: {statistics.median(profiler_exit) * 1e3:.1f} ms per recorded "
              f"step (not in the step times above)")
    prof_name = next((n for n, k in variants if k == "profiler"), None)
    if prof_name:
        ours = overheads.get("attnscope sample-every 1", 0)
        theirs = overheads[prof_name]
        if ours > 0:
            print(f"torch.profiler's overhead / attnscope's at sample-every 1: {theirs / ours:.1f}x")
        else:
            print(f"torch.profiler's overhead {100 * theirs:.2f}%; attnscope's at sample-every 1 is not above zero "
                  f"({100 * ours:.2f}%), so the ratio is unbounded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
