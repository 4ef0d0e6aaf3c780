#!/usr/bin/env python3
"""A transformers Llama trained for a few steps as a user writes it (no attnscope inside), for the
comparison and replay tests (tests/integration/compare_test.py) and the measurements in
docs/ANALYSIS.md. DDP over Gloo when launched with more than one rank.

    launch/attnscope-run --nproc_per_node 2 tests/integration/llama_train.py --attn eager --steps 30

--out FILE writes the mean step time and the model's attention implementation (rank 0).
--duration-s S trains for S seconds instead of --steps. --slow-rank R --slow-layer L --slow-factor N
runs layer L's attention N times on rank R, forward and backward (bench/detection_quality.py's
"whole layer" injection); with --slow-kind output_projection, only that layer's o_proj. A factor
that is not a whole number needs --slow-kind: o_proj's matmul is made wider by a share
(factor - 1) of its output features, forward and backward (WiderProjection).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def slow(module, times):
    """Runs module's forward `times` times, the extra outputs added at zero weight so that the
    backward runs through each: real extra work in that module, forward and backward."""
    forward = module.forward

    def slowed(*args, **kwargs):
        out = forward(*args, **kwargs)
        for _ in range(times - 1):
            extra = forward(*args, **kwargs)
            if isinstance(out, tuple):
                out = (out[0] + 0 * extra[0],) + tuple(out[1:])
            else:
                out = out + 0 * extra
        return out

    module.forward = slowed


class _Cut(torch.autograd.Function):
    """The first n columns of a wide output. Its backward widens the gradient again (a copy);
    as an autograd Function of its own that copy is one op of kind "other", which the healthy
    ranks do not have, so it is not compared with anything. Cut by plain slicing, the copy
    would be the layer's backward layout_copy: a larger excess than the injected one, named
    first."""

    @staticmethod
    def forward(ctx, wide, n):
        ctx.width = wide.shape[-1]
        return wide.narrow(-1, 0, n).clone()

    @staticmethod
    def backward(ctx, grad):
        full = grad.new_zeros(grad.shape[:-1] + (ctx.width,))
        full.narrow(-1, 0, grad.shape[-1]).copy_(grad)
        return full, None


class WiderProjection:
    """Makes each call of `linear` a wider one: its weight with `share` of its rows again, the
    extra outputs cut off (_Cut), so the projection's own matmul does about (1 + share) times the
    work in one call, forward and backward. Not an extra call: one costs its fixed overhead
    whatever its size, which on a model this small is more than a 1.2x slowdown. The wide weight
    is made before each step (`before_step`), outside the model, so that its copy is not counted
    as the layer's work; gradients reach the weight through it."""

    def __init__(self, linear, share):
        self.linear = linear
        # Whole 8s: an odd width runs slower than its work (here 77 columns took 1.56x the time of
        # 64, 80 took 1.21x), which would make the factor a property of the GEMM kernel.
        self.rows = max(8, 8 * round(share * linear.out_features / 8))
        self.wide = None
        linear.forward = self.forward

    def before_step(self):
        w, b = self.linear.weight, self.linear.bias
        self.wide = (torch.cat([w, w[: self.rows]]),
                     None if b is None else torch.cat([b, b[: self.rows]]))

    def forward(self, x):
        return _Cut.apply(F.linear(x, *self.wide), self.linear.out_features)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default="")
    p.add_argument("--duration-s", type=float, default=0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-layer", type=int, default=0)
    p.add_argument("--slow-factor", type=float, default=2)
    p.add_argument("--slow-kind", choices=("output_projection",), default=None)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    whole = a.slow_factor == int(a.slow_factor)
    if a.slow_factor < 1 or (not whole and a.slow_kind is None):
        p.error(f"--slow-factor {a.slow_factor}: allowed: a whole number >= 1, or a number >= 1 with "
                "--slow-kind")
    torch.set_num_threads(1)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=a.hidden, intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
                         max_position_embeddings=a.seq)
    model = LlamaForCausalLM._from_config(config, attn_implementation=a.attn)
    wider = None
    if rank == a.slow_rank:
        attn = model.model.layers[a.slow_layer].self_attn
        if not whole:
            wider = WiderProjection(attn.o_proj, a.slow_factor - 1)
        else:
            slow(attn.o_proj if a.slow_kind == "output_projection" else attn, int(a.slow_factor))
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank + 1000 * a.seed)
    step_s = []
    began = time.perf_counter()
    step = 0

    def more():
        if a.duration_s <= 0:
            return step < a.steps
        # Every rank stops at the same step (DDP's collectives must match): the first to run out
        # of time stops them all.
        over = torch.tensor([float(time.perf_counter() - began >= a.duration_s)])
        if distributed:
            dist.all_reduce(over, op=dist.ReduceOp.MAX)
        return over.item() == 0

    while more():
        step += 1
        batch = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        if wider:
            wider.before_step()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        step_s.append(time.perf_counter() - t0)
    if a.out and rank == 0:
        with open(a.out, "w") as f:
            json.dump({"attn": a.attn, "step_seconds": step_s}, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
