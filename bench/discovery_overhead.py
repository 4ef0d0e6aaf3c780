#!/usr/bin/env python3
"""Step-time overhead of the zero-code attach on real models, 2 ranks under DDP over Gloo: a
transformers LlamaForCausalLM built from a config (or the hand-written GPT of the discovery tests),
with no observer; the attach (module discovery, hooks) and attnscope at sample-every 1; at a sparser
rate; and torch.profiler(profile_memory=True) recording the same steps. Variants alternate in one
seeded random order on every rank (one untimed step after each switch); the result is the ratio of
median step times with a bootstrap 95% interval, plus attnscope's own accounting (docs/PERFORMANCE.md).

    launch/torchrun --nproc_per_node 2 bench/discovery_overhead.py --model llama --rounds 6
"""
import argparse
import os
import random
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import attnscope
from attnscope import _attach

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead_python import bootstrap  # noqa: E402  (the same interval as the example's harness)


def build(a):
    if a.model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(hidden_size=a.hidden, intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                             num_attention_heads=a.heads, num_key_value_heads=a.heads // 2, vocab_size=a.vocab,
                             max_position_embeddings=a.seq)
        model = LlamaForCausalLM._from_config(config, attn_implementation=a.attn)
        return model, lambda m, t: m(input_ids=t, labels=t).loss
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
    import discovery_models as dm
    dm.SEQ, dm.VOCAB = a.seq, a.vocab
    model = dm.GPT(sdpa=a.attn == "sdpa", d=a.hidden, heads=a.heads, layers=a.layers)
    return model, lambda m, t: F.cross_entropy(m(t).reshape(-1, a.vocab), t.reshape(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("llama", "gpt"), default="llama")
    p.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=3, help="timed steps per variant and round")
    p.add_argument("--sparse-every", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model, loss_of = build(a)
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)

    def train_step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        loss = loss_of(model, tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()

    variants = [("no observer", None), ("attach, sample-every 1", 1),
                (f"attach, sample-every {a.sparse_every}", a.sparse_every),
                ("torch.profiler, profile_memory", "profiler")]
    times = {name: [] for name, _ in variants}
    own = {name: [0.0, 0] for name, _ in variants}
    rng = random.Random(12345)  # the same order on every rank: DDP steps stay in lockstep
    for _ in range(2):
        train_step()
    for _ in range(a.rounds):
        order = list(variants)
        rng.shuffle(order)
        for name, kind in order:
            prof = None
            if isinstance(kind, int):
                _attach.install()
                attnscope.start(sample_every=kind, port=0, log_level="warn", aggregation="none",
                                peak_flops=3e10, peak_bandwidth=1e10)
            elif kind == "profiler":
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
                prof.__enter__()
            train_step()  # untimed, after the switch (the attach walks the model here)
            timed = kind if isinstance(kind, int) and kind > 1 else a.steps
            for _ in range(timed):
                t0 = time.perf_counter()
                train_step()
                times[name].append(time.perf_counter() - t0)
            if isinstance(kind, int):
                s = attnscope.summary()
                own[name][0] += s["run"]["overhead_seconds"]
                own[name][1] += timed + 1
                layers = len(s["layers"])
                attnscope.stop()
                _attach.uninstall()
                if layers == 0:
                    sys.exit(f"rank {rank}: the attach found no attention layer in {a.model}")
            elif prof is not None:
                prof.__exit__(None, None, None)
    if rank == 0:
        base = times["no observer"]
        print(f"model: {a.model} ({a.attn}), {a.layers} layers, hidden {a.hidden}, {a.heads} heads, seq {a.seq}, "
              f"batch {a.batch}; 2 ranks, DDP over Gloo, 1 thread each; {a.rounds} rounds, random order")
        print(f"{'variant':<34} {'median step':>12} {'ratio':>8}   95% interval")
        ratios = {}
        for name, _ in variants:
            med = statistics.median(times[name])
            if name == "no observer":
                print(f"{name:<34} {med * 1e3:10.2f}ms {1:>8}")
                continue
            lo, hi = bootstrap(base, times[name], rng)
            ratios[name] = med / statistics.median(base)
            line = f"{name:<34} {med * 1e3:10.2f}ms {ratios[name]:8.4f}   {lo:.4f} .. {hi:.4f}"
            if own[name][1]:
                per = own[name][0] / own[name][1]
                line += f"   own accounting {per * 1e6:.1f} us/step = {100 * per / statistics.median(base):.3f}%"
            print(line)
        ours = ratios["attach, sample-every 1"] - 1
        theirs = ratios["torch.profiler, profile_memory"] - 1
        print(f"torch.profiler's overhead {100 * theirs:.2f}%, the attach's at sample-every 1 {100 * ours:.2f}%"
              + (f": {theirs / ours:.1f}x" if ours > 0 else " (not above zero: the ratio is unbounded)"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
