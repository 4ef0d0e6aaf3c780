#!/usr/bin/python3
"""A plain PyTorch training script: torch.nn.TransformerEncoder trained with DistributedDataParallel
over Gloo, one process per rank under torchrun. It knows nothing of attnscope: run it through
launch/attnscope-run and every attention layer is observed anyway.

    launch/attnscope-run --nproc_per_node 2 examples/train_transformer.py --steps 50
    launch/torchrun --nproc_per_node 2 examples/train_transformer.py --steps 50   # without attnscope

--slow-rank R --slow-factor F makes rank R run one layer's self-attention F times per step (real
work, for trying straggler detection).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--duration-s", type=float, default=0, help="stop after this many seconds (0: run all steps)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-factor", type=int, default=1)
    p.add_argument("--slow-layer", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for name in ("layers", "d_model", "heads", "seq", "batch", "vocab", "steps", "threads", "slow_factor"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.d_model % a.heads:
        p.error(f"--d-model {a.d_model} is not a multiple of --heads {a.heads}")
    if not 0 <= a.slow_layer < a.layers:
        p.error(f"--slow-layer {a.slow_layer} is outside 0..{a.layers - 1}")
    return a


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.d_model)
        layer = nn.TransformerEncoderLayer(a.d_model, a.heads, dim_feedforward=4 * a.d_model, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
        self.head = nn.Linear(a.d_model, a.vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def slow_down(attn, factor):
    """Runs the module's attention `factor` times per call (the extra results are discarded)."""
    forward = attn.forward

    def repeated(*args, **kwargs):
        for _ in range(factor - 1):
            forward(*args, **kwargs)
        return forward(*args, **kwargs)
    attn.forward = repeated


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(a.seed)
    model = Model(a)
    if rank == a.slow_rank and a.slow_factor > 1:
        slow_down(model.encoder.layers[a.slow_layer].self_attn, a.slow_factor)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(a.seed + rank)
    start = time.time()
    step = 0
    for step in range(a.steps):
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if a.duration_s and time.time() - start >= a.duration_s:
            break
    if rank == 0:
        print(f"rank 0: {step + 1} steps in {time.time() - start:.1f} s, last loss {loss.item():.3f}", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
