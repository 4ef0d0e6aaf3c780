#!/usr/bin/env python3
"""Training scripts as users write them, for the discovery tests (tests/integration/discovery_test.py):
no attnscope in them. Each trains one model for a few steps, with DDP over Gloo when launched with
more than one rank, and writes what it measured itself to --out (one JSON per rank): the losses,
the mean step time, and Dynamo's graph-break count.

    launch/attnscope-run --nproc_per_node 2 tests/integration/discovery_models.py llama_sdpa --steps 4

Models (all built from small configs, nothing downloaded):
  llama_eager, llama_sdpa   transformers LlamaForCausalLM (GQA, rotary), attn_implementation eager/sdpa
  llama_ckpt                llama_eager with model.gradient_checkpointing_enable()
  gpt2                      transformers GPT2LMHeadModel: one fused qkv Conv1D (c_attn), c_proj
  bert                      transformers BertForMaskedLM: output projection in BertSelfOutput, a sibling
                            of BertSelfAttention inside BertAttention
  gpt_manual, gpt_sdpa      a hand-written GPT block (one qkv Linear, split/view/transpose, q@k^T scaled,
                            causal masked_fill, softmax, dropout, @v, output Linear), or SDPA in its place
  gpt_ckpt_wrapper          gpt_manual with torch's checkpoint_wrapper around every block
  vit                       a hand-written vision transformer (conv patch embedding, fused qkv, SDPA)
  mha_train, mha_eval       torch.nn.TransformerEncoder (nn.MultiheadAttention); eval runs the fast path
                            (_transformer_encoder_layer_fwd) plus a standalone nn.MultiheadAttention
                            (_native_multi_head_attention) without grad
  mixer                     attention in a module whose class name does not say so (nothing found)
  sdpa_caller               SDPA called by a module whose class name does not say attention (Head)

--fsdp shards with FSDP2 (fully_shard per block and at the root) instead of DDP. --compile compiles
first (before DDP or FSDP) with Inductor: the whole model (torch.compile(model), the default),
`method` (model.compile(), in place) or `blocks` (each decoder block torch.compile'd and put back in
its list, the TorchTitan recipe; with --fsdp each compiled block is then sharded). The output then
also holds Dynamo's graph-break and graph counts.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, SEQ, BATCH = 128, 32, 4


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, sdpa):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)
        self.heads, self.sdpa = heads, sdpa
        self.register_buffer("bias", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, sdpa)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, sdpa, d=64, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, d)
        self.wpe = nn.Embedding(SEQ, d)
        self.blocks = nn.ModuleList([Block(d, heads, sdpa) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class Mixer(nn.Module):
    """Softmax attention in a module whose class name does not say attention."""

    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
        return self.out(w @ v)


class MixerNet(nn.Module):
    def __init__(self, d=64, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.mixers = nn.ModuleList([Mixer(d) for _ in range(layers)])
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx):
        x = self.embed(idx)
        for m in self.mixers:
            x = x + m(x)
        return self.head(x)


class Head(nn.Module):
    """Calls F.scaled_dot_product_attention in a module whose class name does not say attention."""

    def __init__(self, d, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.heads, C // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class HeadNet(nn.Module):
    def __init__(self, d=64, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.heads = nn.ModuleList([Head(d) for _ in range(layers)])
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx):
        x = self.embed(idx)
        for h in self.heads:
            x = x + h(x)
        return self.head(x)


class VitAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class VitBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = VitAttention(d, heads)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, image=32, patch=8, d=64, heads=4, layers=2, classes=10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[VitBlock(d, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


class EncoderNet(nn.Module):
    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.MultiheadAttention(d, heads, batch_first=True)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, idx):
        x = self.encoder(self.embed(idx))
        x, _ = self.pool(x, x, x, need_weights=False)
        return self.head(x)


def build(name):
    """(model, batch function, loss function)."""
    def tokens(gen):
        return torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)

    def lm_loss(model, batch):
        return F.cross_entropy(model(batch).reshape(-1, VOCAB), batch.reshape(-1))

    def hf_loss(model, batch):
        return model(input_ids=batch, labels=batch).loss

    if name.startswith("llama"):
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=SEQ)
        impl = "sdpa" if name == "llama_sdpa" else "eager"
        model = LlamaForCausalLM._from_config(config, attn_implementation=impl)
        if name == "llama_ckpt":
            model.gradient_checkpointing_enable()
        return model, tokens, hf_loss
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=SEQ)
        return GPT2LMHeadModel(config), tokens, hf_loss
    if name == "bert":
        from transformers import BertConfig, BertForMaskedLM
        config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            vocab_size=VOCAB, max_position_embeddings=SEQ)
        return BertForMaskedLM(config), tokens, hf_loss
    if name in ("gpt_manual", "gpt_sdpa", "gpt_ckpt_wrapper"):
        model = GPT(sdpa=name == "gpt_sdpa")
        if name == "gpt_ckpt_wrapper":
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
                apply_activation_checkpointing, checkpoint_wrapper)
            apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper,
                                           check_fn=lambda m: isinstance(m, Block))
        return model, tokens, lm_loss
    if name == "vit":
        def images(gen):
            return torch.randn(BATCH, 3, 32, 32, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)
        return VisionTransformer(), images, lambda model, b: F.cross_entropy(model(b[0]), b[1])
    if name in ("mha_train", "mha_eval"):
        return EncoderNet(), tokens, lm_loss
    if name == "mixer":
        return MixerNet(), tokens, lm_loss
    if name == "sdpa_caller":
        return HeadNet(), tokens, lm_loss
    raise SystemExit(f"unknown model {name!r}")


def blocks_of(model):
    """The list of decoder blocks: (parent ModuleList, index) pairs."""
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and m and \
                type(getattr(m[0], "_orig_mod", m[0])).__name__ in ("LlamaDecoderLayer", "Block"):
            return [(m, i) for i in range(len(m))]
    raise SystemExit("no decoder blocks found")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default="")
    p.add_argument("--compile", nargs="?", const="model", choices=("model", "method", "blocks"),
                   help="torch.compile before DDP or FSDP: the whole model, model.compile(), or each block")
    p.add_argument("--fsdp", action="store_true",
                   help="FSDP2 instead of DDP: fully_shard on every block (model.layers.N, transformer.h.N) "
                        "and on the root, the common recipe")
    p.add_argument("--wait-metrics-s", type=float, default=0, help="then stay up this long (metrics scrapes)")
    p.add_argument("--metrics-read", default="", help="with --wait-metrics-s: stop waiting once this file exists")
    a = p.parse_args()
    torch.set_num_threads(1)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    model, batch_of, loss_of = build(a.model)
    if a.compile == "model":
        model = torch.compile(model)
    elif a.compile == "method":
        model.compile()
    elif a.compile == "blocks":
        for parent, i in blocks_of(model):
            parent[i] = torch.compile(parent[i])
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for parent, i in blocks_of(model):
            fully_shard(parent[i])
        fully_shard(model)
    elif distributed:
        model = nn.parallel.DistributedDataParallel(model)
    gen = torch.Generator().manual_seed(1 + rank)
    losses, step_s = [], []
    if a.model == "mha_eval":
        model.eval()
        with torch.no_grad():
            for _ in range(a.steps):
                t0 = time.perf_counter()
                losses.append(float(loss_of(model, batch_of(gen))))
                step_s.append(time.perf_counter() - t0)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = loss_of(model, batch_of(gen))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_s.append(time.perf_counter() - t0)
            losses.append(float(loss))
    breaks, graphs = 0, 0
    if a.compile:
        from torch._dynamo.utils import counters
        breaks = sum(counters["graph_break"].values())
        graphs = counters["stats"]["unique_graphs"]
    if a.out:
        with open(a.out.replace("{rank}", str(rank)), "w") as f:
            json.dump({"losses": losses, "step_seconds": step_s, "graph_breaks": breaks, "graphs": graphs}, f)
    deadline = time.monotonic() + a.wait_metrics_s
    while time.monotonic() < deadline and not (a.metrics_read and os.path.exists(a.metrics_read)):
        time.sleep(0.1)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
