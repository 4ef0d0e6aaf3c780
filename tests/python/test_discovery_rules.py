"""The discovery rule (python/attnscope/_discovery.py, docs/DISCOVERY.md) on small module trees, and
the attach's lifecycle around it. Nothing is trained or compiled: torch.compile's wrappers are
built (compilation is lazy) but never called. PYTHONPATH=build/python."""
import json
import re
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from attnscope import _attach, _discovery
from attnscope._discovery import Rule

try:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import fully_shard
except ImportError:  # pragma: no cover - torch built without distributed
    checkpoint_wrapper = fully_shard = None


# --- toy trees ------------------------------------------------------------------------------------

class AttnCore(nn.Module):
    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.core = AttnCore()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        return self.proj(self.core(q, k, v))


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.attn = CausalSelfAttention(d)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.GELU())

    def forward(self, x):
        return x + self.mlp(x + self.attn(x))


class Gpt(nn.Module):
    def __init__(self, n=2, d=8):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


class BertSelfAttention(CausalSelfAttention):
    pass


class BertSelfOutput(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.dense = nn.Linear(d, d)


class BertAttention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.self = BertSelfAttention(d)
        self.output = BertSelfOutput(d)


class AttentionNet(nn.Module):
    """A model named like attention holding two layers side by side: a container, not a layer."""

    def __init__(self):
        super().__init__()
        self.first = CausalSelfAttention()
        self.second = CausalSelfAttention()


class FsdpWrapper(nn.Module):
    """FSDP1's wrapper shape: the wrapped module under `_fsdp_wrapped_module`."""

    def __init__(self, inner):
        super().__init__()
        self._fsdp_wrapped_module = inner


def layers(walk):
    return [(f.name, f.rule) for f in walk.found]


GPT_LAYERS = [("blocks.0.attn", "class_name"), ("blocks.1.attn", "class_name")]


@pytest.fixture(scope="module")
def process_group():
    """A one-rank Gloo group, for real DDP and FSDP2 wrappers."""
    if not dist.is_available() or fully_shard is None:
        pytest.skip("torch without torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# --- which modules are layers ---------------------------------------------------------------------

def test_outermost_class_name_match_is_the_layer():
    walk = _discovery.walk(Gpt(), Rule())
    assert layers(walk) == GPT_LAYERS
    assert [f.source for f in walk.found] == ["CausalSelfAttention"] * 2
    assert walk.compiled == 0 and walk.regions == []


def test_a_root_that_is_a_layer_is_named_by_its_class():
    assert layers(_discovery.walk(CausalSelfAttention(), Rule())) == [("CausalSelfAttention", "class_name")]


def test_two_matches_side_by_side_make_a_container():
    assert layers(_discovery.walk(AttentionNet(), Rule())) == [("first", "class_name"), ("second", "class_name")]


def test_bert_attention_holds_its_output_projection():
    tree = nn.ModuleDict({"layer0": BertAttention()})
    walk = _discovery.walk(tree, Rule())
    assert layers(walk) == [("layer0", "class_name")]
    assert [f.source for f in walk.found] == ["BertAttention"]


def test_a_layers_subtree_is_named_but_not_searched():
    model = Gpt()
    walk = _discovery.walk(model, Rule())
    names = {path for _, path in walk.names}
    assert "blocks.0.attn.core" in names and "blocks.1.mlp.0" in names
    assert ("blocks.0.attn.core", "class_name") not in layers(walk)  # AttnCore matches, inside a layer
    assert len(walk.names) == len(list(model.modules()))


def test_nothing_found_in_a_tree_without_attention():
    walk = _discovery.walk(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), Rule())
    assert walk.found == [] and len(walk.names) == 3


def test_walked_modules_and_known_layers_are_skipped():
    model = Gpt()
    first = _discovery.walk(model, Rule())
    walked = {m for m, _ in first.names}
    assert _discovery.walk(model, Rule(), walked=walked).found == []
    again = _discovery.walk(model, Rule(), layers={f.module for f in first.found})
    assert layers(again) == [("blocks.0.attn.core", "class_name"), ("blocks.1.attn.core", "class_name")]


# --- include and exclude --------------------------------------------------------------------------

def test_include_replaces_the_class_name_pattern_and_matches_paths():
    walk = _discovery.walk(Gpt(), Rule(include=re.compile(r"mlp$")))
    assert layers(walk) == [("blocks.0.mlp", "include"), ("blocks.1.mlp", "include")]


def test_include_takes_the_outermost_match_whatever_it_holds():
    walk = _discovery.walk(AttentionNet(), Rule(include=re.compile("Attention")))
    assert layers(walk) == [("AttentionNet", "include")]


def test_exclude_keeps_a_module_out_but_searches_its_children():
    walk = _discovery.walk(Gpt(), Rule(exclude=re.compile(r"^blocks\.0\.attn$")))
    assert layers(walk) == [("blocks.0.attn.core", "class_name"), ("blocks.1.attn", "class_name")]


def test_exclude_by_class_name():
    walk = _discovery.walk(Gpt(), Rule(exclude=re.compile("CausalSelfAttention")))
    assert layers(walk) == [("blocks.0.attn.core", "class_name"), ("blocks.1.attn.core", "class_name")]


def test_patterns_search_the_class_name_and_a_non_empty_path():
    rule = Rule(include=re.compile("^$"))
    assert not _discovery.is_candidate(rule, nn.Linear(1, 1), "")  # the root's empty path is not searched
    assert _discovery.matches(re.compile("Linear"), nn.Linear(1, 1), "")
    assert _discovery.matches(re.compile(r"\.qkv"), nn.Linear(1, 1), "blocks.0.qkv")
    assert not _discovery.matches(None, nn.Linear(1, 1), "qkv")


# --- names: wrappers' segments left out -----------------------------------------------------------

@pytest.mark.parametrize("wrap", [
    pytest.param(lambda m: nn.DataParallel(m), id="DataParallel"),
    pytest.param(lambda m: torch.compile(m), id="torch.compile"),
    pytest.param(lambda m: FsdpWrapper(m), id="fsdp1_wrapped_module"),
])
def test_wrappers_add_no_segment(wrap):
    assert layers(_discovery.walk(wrap(Gpt()), Rule())) == GPT_LAYERS


@pytest.mark.skipif(checkpoint_wrapper is None, reason="torch without torch.distributed")
def test_checkpoint_wrapper_adds_no_segment():
    model = Gpt()
    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block)
    assert layers(_discovery.walk(model, Rule())) == GPT_LAYERS


def test_distributed_data_parallel_adds_no_segment(process_group):
    ddp = nn.parallel.DistributedDataParallel(Gpt())
    assert layers(_discovery.walk(ddp, Rule())) == GPT_LAYERS


def test_children_leave_only_wrapper_segments_out():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = nn.Linear(1, 1)  # `module` is a wrapper's segment only under DDP/DataParallel
    assert [p for _, p in _discovery.children(Holder(), "x")] == ["x.module"]
    assert [p for _, p in _discovery.children(nn.DataParallel(nn.Linear(1, 1)), "x")] == ["x"]


# --- compiled code --------------------------------------------------------------------------------

def test_compiled_model_layers_are_observed_by_markers():
    walk = _discovery.walk(torch.compile(Gpt()), Rule())
    assert layers(walk) == GPT_LAYERS
    assert [f.source for f in walk.found] == ["CausalSelfAttention, in compiled code (markers)"] * 2
    assert walk.compiled == 1 and walk.regions == []


def test_blocks_compiled_one_by_one():
    model = Gpt()
    for i, block in enumerate(model.blocks):
        model.blocks[i] = torch.compile(block)
    walk = _discovery.walk(model, Rule())
    assert layers(walk) == GPT_LAYERS and walk.compiled == 2


def test_module_compile_in_place_is_compiled():
    model = Gpt()
    model.compile()
    assert _discovery.is_compiled(model) and not _discovery.is_optimized(model)
    assert not _discovery.cuda_graphs(model)
    assert layers(_discovery.walk(model, Rule())) == GPT_LAYERS


def test_fsdp2_compiled_module_is_recognised(process_group):
    sharded = fully_shard(torch.compile(Gpt()))
    assert type(sharded).__name__ == "FSDPOptimizedModule"
    assert _discovery.is_optimized(sharded)
    walk = _discovery.walk(sharded, Rule())
    assert layers(walk) == GPT_LAYERS and walk.compiled == 1


@pytest.mark.parametrize("kwargs", [{"mode": "reduce-overhead"}, {"mode": "max-autotune"},
                                    {"options": {"triton.cudagraphs": True}}], ids=str)
def test_cuda_graphs_hide_layers_behind_one_region(kwargs):
    compiled = torch.compile(Gpt(), **kwargs)
    assert _discovery.cuda_graphs(compiled)
    walk = _discovery.walk(compiled, Rule())
    assert layers(walk) == [("blocks.0.attn", "hidden_by_compile"), ("blocks.1.attn", "hidden_by_compile")]
    assert all(f.module is None for f in walk.found)
    assert walk.regions == [compiled]
    assert _discovery.region_name(compiled, dict(walk.names)) == "Gpt"
    assert _discovery.region_source(compiled) == "Gpt"


def test_a_compiled_block_under_cuda_graphs_is_a_region_named_by_its_path():
    model = Gpt()
    model.blocks[1] = torch.compile(model.blocks[1], mode="reduce-overhead")
    walk = _discovery.walk(model, Rule())
    assert layers(walk) == [("blocks.0.attn", "class_name"), ("blocks.1.attn", "hidden_by_compile")]
    assert walk.regions == [model.blocks[1]]
    assert _discovery.region_name(model.blocks[1], dict(walk.names)) == "blocks.1"


def test_module_compile_options_kept_by_the_attach_say_cuda_graphs():
    model = Gpt()
    model.compile(mode="reduce-overhead")
    model._attnscope_compile_options = {"triton.cudagraphs": True}  # what the attach's Module.compile keeps
    assert _discovery.cuda_graphs(model)
    walk = _discovery.walk(model, Rule())
    assert [r for _, r in layers(walk)] == ["hidden_by_compile"] * 2
    assert walk.regions == []  # compiled in place: the attach wraps its compiled call instead of hooks


# --- the encoder's fast path ----------------------------------------------------------------------

def test_encoder_layer_self_attn_carries_the_fast_path():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2,
                                    enable_nested_tensor=False)
    walk = _discovery.walk(encoder, Rule())
    assert layers(walk) == [("layers.0.self_attn", "class_name"), ("layers.1.self_attn", "class_name")]
    assert [f.host for f in walk.found] == list(encoder.layers)
    assert walk.found[0].source == "MultiheadAttention, and TransformerEncoderLayer's fast path"


def test_fast_path_only_in_eval_without_grad_and_batch_first():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    assert not _discovery.may_run_fast_path(layer)  # training
    layer.eval()
    assert not _discovery.may_run_fast_path(layer)  # grad wanted for the projections
    with torch.no_grad():
        assert _discovery.may_run_fast_path(layer)
        assert not _discovery.may_run_fast_path(nn.TransformerEncoderLayer(8, 2, 16).eval())  # not batch_first


# --- rotary helpers, results, markers, the SDPA caller --------------------------------------------

def test_rotary_functions_by_name():
    def apply_rotary_pos_emb():
        pass

    def rope():
        pass

    def property_names():  # "rope" inside a word is not a RoPE helper
        pass

    def rotate_half():
        pass

    def wrapped_rope():
        pass
    wrapped_rope._attnscope_wrapped = True
    namespace = {f.__name__: f for f in (apply_rotary_pos_emb, rope, property_names, rotate_half, wrapped_rope)}
    namespace["RotaryEmbedding"] = nn.Module  # a class, not a function
    assert [n for n, _ in _discovery.rotary_functions(namespace)] == ["apply_rotary_pos_emb", "rope"]


def test_results_hand_over_the_tensors_that_need_backward():
    x = torch.ones(2, requires_grad=True) * 2
    y = torch.ones(2)
    assert _discovery.results(x) == (x._cdata,)
    assert _discovery.results(y) == ()
    assert _discovery.results((x, None, y)) == [x._cdata]
    assert _discovery.results([y]) == []
    assert _discovery.results(("text", 3)) is None
    assert _discovery.results({"out": x}) is None


def test_markers_carry_grad_tensors_else_the_first_floating_one():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2)
    c = torch.ones(2, requires_grad=True)
    i = torch.ones(2, dtype=torch.long)
    assert _discovery.marked([(0, i), (1, a), (2, b), ("c", c)]) == [1, "c"]
    assert _discovery.marked([(0, i), (1, b), (2, b)]) == [1]
    assert _discovery.marked([(0, i)]) == []
    assert _discovery.tensor_items(b) == ([(0, b)], True)
    assert _discovery.tensor_items((b, "x", i)) == ([(0, b), (2, i)], False)
    assert _discovery.tensor_items("x") is None


def test_sdpa_caller_is_the_nearest_walked_module_in_the_stack():
    frames = []

    def attention_function(module, q):  # transformers' shape: the module passed as `module`
        frames.append(sys._getframe(0))
        return q

    class Caller(nn.Module):
        def forward(self, q):
            return attention_function(None, q)
    caller = Caller()
    caller(torch.ones(1))
    frame = frames[0]
    assert _discovery.sdpa_caller(frame, {caller: "layers.0"}, set()) is caller
    assert _discovery.sdpa_caller(frame, {}, set()) is None  # not in a walked tree
    assert _discovery.sdpa_caller(frame, {caller: "layers.0"}, {frame.f_code}) is None  # looked at before
    assert _discovery.sdpa_caller(frame, {caller: "layers.0"}, set(), depth=1) is None


# --- the attachment's lifecycle -------------------------------------------------------------------

@pytest.fixture
def attachment():
    """An installed Attachment that starts no session (started: as if the script had started it)."""
    assert _attach.attachment() is None and not getattr(torch, "_attnscope_attached", False)
    a = _attach.Attachment(Rule(), {"enable": False})
    a.started = True
    a.install()
    yield a
    a.uninstall()


def test_install_replaces_and_uninstall_restores(attachment):
    sdpa, compile_ = torch.nn.functional.scaled_dot_product_attention, torch.nn.Module.compile
    assert sdpa.__wrapped__ is not None and compile_.__wrapped__ is not None
    assert attachment.discovery_hook is not None and attachment.optimizer_hook is not None
    model = Gpt()
    model(torch.ones(1, 3, 8))
    assert sorted(attachment.layers.values()) == ["blocks.0.attn", "blocks.1.attn"]
    assert len(model.blocks[0].attn._forward_pre_hooks) == 1
    attachment.uninstall()
    assert not hasattr(torch.nn.functional.scaled_dot_product_attention, "__wrapped__")
    assert not hasattr(torch.nn.Module.compile, "__wrapped__")
    assert len(model.blocks[0].attn._forward_pre_hooks) == 0 and len(model.blocks[0].attn._forward_hooks) == 0
    assert attachment.discovery_hook is None and not attachment.layers
    assert not torch._attnscope_attached


def test_sdpa_caller_becomes_a_layer(attachment):
    class Mixer(nn.Module):  # no attention in its name: found by its SDPA call
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)
    model = nn.Sequential(nn.Linear(4, 4), Mixer())
    model(torch.ones(1, 2, 3, 4))
    assert list(attachment.layers.values()) == ["1"]
    assert attachment.origins[-1] == ("1", "calls_sdpa", "Mixer")


def test_region_hooks_open_and_close_a_region(attachment):
    compiled = torch.compile(Gpt(), mode="reduce-overhead")
    attachment.walk(compiled)
    assert compiled in attachment.regions
    x = torch.ones(1, 3, 8)
    for hook in list(compiled._forward_pre_hooks.values()):
        hook(compiled, (x,))
    assert attachment._open_modules() == [compiled]
    for hook in list(compiled._forward_hooks.values()):
        hook(compiled, (x,), x)
    assert attachment._open_modules() == []
    assert ("Gpt", "compiled_region", "Gpt") in attachment.origins


def test_close_stops_the_session_the_attachment_started(tmp_path, monkeypatch):
    assert not _attach.attnscope.is_running()
    summary = tmp_path / "summary.json"
    for name, value in {"PORT": "0", "LOG_LEVEL": "error", "PEAK_FLOPS": "3e10", "PEAK_BANDWIDTH": "1e10",
                        "SUMMARY_JSON": str(summary)}.items():
        monkeypatch.setenv("ATTNSCOPE_" + name, value)
    a = _attach.Attachment.from_environment()
    a.install()
    try:
        Gpt()(torch.ones(1, 3, 8, requires_grad=True)).sum().backward()
        assert a.started_session and _attach.attnscope.is_running()
    finally:
        a.close()
    assert not _attach.attnscope.is_running() and not torch._attnscope_attached
    discovery = json.loads(summary.read_text())["discovery"]
    assert [(l["name"], l["rule"], l["source"]) for l in discovery["layers"]] == [
        ("blocks.0.attn", "class_name", "CausalSelfAttention"), ("blocks.1.attn", "class_name", "CausalSelfAttention")]
