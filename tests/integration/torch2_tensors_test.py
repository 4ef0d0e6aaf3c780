#!/usr/bin/env python3
"""PyTorch 2.x tensors through attnscope's callbacks (Python module, roofline on): inside attention
scopes a torch.compile(dynamic=True) function is traced (FakeTensors with symbolic shapes reach
RecordFunction), a nested (jagged) tensor and a DTensor run attention, and SDPA runs on the CPU
flash kernel and the math path. Nothing may throw or crash; the summary has every layer, forward
and backward; SDPA's backend is named; the traced and nested calls carry no FLOP estimates they
could not know. Run by ctest: pytest torch2_tensors_test.py::test_tensors --build-dir BUILD_DIR
"""
import importlib
import json
import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


@pytest.fixture
def attnscope(build_dir):
    """The attnscope module of the build tree (its python/)."""
    sys.path.insert(0, os.path.join(build_dir, "python"))
    return importlib.import_module("attnscope")


def attention(q, k, v):
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return F.softmax(s, dim=-1) @ v


def test_tensors(run_dir, attnscope):
    torch.manual_seed(0)
    summary_path = os.path.join(run_dir, "s.json")
    attnscope.start(sample_every=1, summary_json=summary_path, peak_flops=3e10, peak_bandwidth=1e10,
                    port=0, log_level="warn")

    compiled = torch.compile(attention, dynamic=True, backend="aot_eager")
    graph_breaks = []
    for seq in (8, 12, 16):  # dynamic shapes: one trace with a symbolic sequence length
        q, k, v = (torch.randn(2, 4, seq, 8, requires_grad=True) for _ in range(3))
        with attnscope.attention("compiled"):
            out = compiled(q, k, v)
        out.sum().backward()
        eager = attention(q.detach(), k.detach(), v.detach())
        assert torch.allclose(out.detach(), eager, atol=1e-5), "compiled attention differs from eager"
        attnscope.step()

    # Nested (jagged) tensors: per-sequence lengths, SDPA over them ([batch, heads, seq*, head_dim]).
    nt = torch.nested.nested_tensor([torch.randn(5, 4, 8), torch.randn(7, 4, 8)], layout=torch.jagged).transpose(1, 2)
    with attnscope.attention("nested"):
        out = F.scaled_dot_product_attention(nt, nt, nt)
    assert out.is_nested
    attnscope.step()

    # DTensor on a world of one: global shapes, Python dispatch.
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    plain = torch.randn(2, 4, 16, 8)
    x = distribute_tensor(plain, mesh, [Shard(0)])
    with attnscope.attention("dtensor"):
        y = F.softmax(x @ x.transpose(-2, -1), dim=-1) @ x
    with attnscope.attention("plain"):
        z = F.softmax(plain @ plain.transpose(-2, -1), dim=-1) @ plain
    assert torch.allclose(y.full_tensor(), z)
    attnscope.step()

    # SDPA's CPU kernels, forward and backward.
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    for step in range(2):
        with attnscope.attention("sdpa_flash"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        with attnscope.attention("sdpa_math"):
            b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
        (a + b).sum().backward()
        attnscope.step()
    attnscope.stop()
    dist.destroy_process_group()

    s = json.load(open(summary_path))
    layers = {l["name"]: l for l in s["layers"]}
    missing = {"compiled", "nested", "dtensor", "sdpa_flash", "sdpa_math"} - set(layers)
    assert not missing, f"layers missing from the summary: {missing}; have {sorted(layers)}"
    fwd = layers["compiled"]["phases"]["forward"]
    assert fwd["calls"] == 3, fwd["calls"]
    for name in ("sdpa_flash", "sdpa_math"):
        phases = layers[name]["phases"]
        assert "fused_attention" in phases["forward"]["op_kinds"], (name, sorted(phases["forward"]["op_kinds"]))
        assert "backward" in phases and "fused_attention" in phases["backward"]["op_kinds"], (name, sorted(phases))
    assert layers["sdpa_flash"]["phases"]["forward"]["attention_backends"] == {"flash": 2}, layers["sdpa_flash"]
    assert layers["sdpa_flash"]["phases"]["backward"]["attention_backends"] == {"flash": 2}, layers["sdpa_flash"]
    assert layers["sdpa_math"]["phases"]["forward"]["attention_backends"] == {"math": 2}, layers["sdpa_math"]
    # Roofline: a DTensor op (Python dispatch, global shapes) is not estimated (the local op it runs
    # is nested under it, and only top-level ops are); the same attention on plain tensors is.
    roof = s["roofline"]["cells"]
    flops = {name: sum(c["flops"] for c in roof if c["layer"] == name and c["phase"] == "forward")
             for name in ("dtensor", "plain")}
    assert flops["plain"] > 0 and flops["dtensor"] == 0, flops
    print("torch 2.x tensors: compiled (dynamic), nested, DTensor and SDPA flash/math observed;",
          "backends", layers["sdpa_flash"]["phases"]["forward"]["attention_backends"],
          layers["sdpa_math"]["phases"]["forward"]["attention_backends"])
