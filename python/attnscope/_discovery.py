"""The discovery rule (docs/DISCOVERY.md) as functions of a module tree: which modules are attention
layers, their names, what compiled code hides. Nothing here registers a hook or touches a session:
the attach (_attach.py) acts on what these return, and tests/python/test_discovery_rules.py checks
them on small module trees.
"""
import re
import types
from typing import NamedTuple, Optional

import torch

DEFAULT_PATTERN = re.compile(r"attention|attn", re.IGNORECASE)
ROTARY_FUNCTION = re.compile(r"rotary|(^|_)rope($|_)", re.IGNORECASE)
# Wrapper modules whose child is the wrapped model: the child's name is not a path segment.
WRAPPER_CHILDREN = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
DATA_PARALLEL = ("DistributedDataParallel", "DataParallel")
FAST_PATH_HOSTS = ("TransformerEncoderLayer",)  # the decoder layer has no fused fast path


class Rule(NamedTuple):
    """The patterns that steer the rule: include (ATTNSCOPE_ATTENTION_MODULES) replaces the
    class-name pattern, exclude (ATTNSCOPE_ATTENTION_EXCLUDE) keeps modules from being layers.
    Compiled regular expressions or None."""
    include: Optional[re.Pattern] = None
    exclude: Optional[re.Pattern] = None


class Found(NamedTuple):
    """One decision of a walk, in walk order. `module` is None for a layer hidden by compiled code
    (nothing to hook); `host` is the TransformerEncoderLayer whose fast path runs this layer as one
    fused op, else None."""
    name: str
    rule: str
    source: str
    module: Optional[torch.nn.Module] = None
    host: Optional[torch.nn.Module] = None


class Walk(NamedTuple):
    """What one walk of a tree decided: `names` (module, cleaned path) of every module it reached,
    first name kept, for the SDPA fallback and region names; `found` the layers (and those compiled
    code hides); `regions` the compiled modules observed whole (the fallback); `compiled` how many
    compiled modules it met."""
    names: list
    found: list
    regions: list
    compiled: int


def matches(pattern, module, path):
    """Whether `pattern` is searched successfully in the module's class name or its path."""
    return pattern is not None and (pattern.search(type(module).__name__) is not None or
                                    (path != "" and pattern.search(path) is not None))


def children(module, path):
    """(child, cleaned path) of each direct child, wrapper segments left out."""
    wrapper = type(module).__name__ in DATA_PARALLEL
    for name, child in module.named_children():
        if name in WRAPPER_CHILDREN or (wrapper and name == "module"):
            yield child, path
        else:
            yield child, f"{path}.{name}" if path else name


def is_candidate(rule, module, path):
    """Whether the attention pattern names this module (exclusions applied)."""
    if matches(rule.exclude, module, path):
        return False
    if rule.include is not None:
        return matches(rule.include, module, path)
    return DEFAULT_PATTERN.search(type(module).__name__) is not None


def frontier(rule, module, path):
    """The candidates below `module` that have no candidate between them and it."""
    found = []
    for child, child_path in children(module, path):
        if is_candidate(rule, child, child_path):
            found.append(child)
        else:
            found.extend(frontier(rule, child, child_path))
    return found


def is_optimized(module):
    """torch.compile(module)'s wrapper, whatever FSDP2's fully_shard made of its class
    (FSDPOptimizedModule)."""
    optimized = getattr(getattr(torch, "_dynamo", None), "OptimizedModule", None)
    return (optimized is not None and isinstance(module, optimized)) or type(module).__name__ == "OptimizedModule"


def is_compiled(module):
    """torch.compile(module)'s wrapper, or a module compiled in place by Module.compile."""
    return is_optimized(module) or getattr(module, "_compiled_call_impl", None) is not None


def cuda_graphs(module):
    """Whether a torch.compile'd module replays CUDA graphs (mode "reduce-overhead" or
    "max-autotune", option triton.cudagraphs): a replay runs none of the markers' host code, so
    its layers cannot be seen one by one. Module.compile's options are those the attach kept
    (`_attnscope_compile_options`)."""
    fn = getattr(getattr(module, "dynamo_ctx", None), "callback", None)
    if fn is None:
        fn = getattr(module, "_attnscope_compile_options", None)
    for _ in range(8):  # down the chain of Dynamo's wrappers to torch.compile's backend
        config = fn if isinstance(fn, dict) else getattr(fn, "config", None)
        if isinstance(config, dict):
            return bool(config.get("triton.cudagraphs"))
        fn = getattr(fn, "_torchdynamo_orig_backend", None)
        if fn is None:
            return False
    return False


def layer_source(module, compiled=False, host=None):
    """What the summary says a layer was found as: its class, where it runs."""
    source = type(module).__name__ + (", in compiled code (markers)" if compiled else "")
    if host is not None:
        source += f", and {type(host).__name__}'s fast path"
    return source


def walk(root, rule, walked=(), layers=()):
    """Chooses the layers of the tree under `root` (docs/DISCOVERY.md, "The rule"): modules in
    `walked` (reached by an earlier walk) are skipped, modules in `layers` are not chosen again.
    Layers under compiled code are observed through the markers their hooks put into the compiled
    graph; under a module that replays CUDA graphs they are hidden (rule hidden_by_compile), and the
    compiled module is observed as one region instead (the fallback)."""
    names, found, regions = [], [], []
    seen = set()
    compiled_seen = 0

    def reached(module):
        return module in seen or module in walked

    def reach(module, path):
        seen.add(module)
        names.append((module, path))

    def visit(module, path, parent, compiled):
        nonlocal compiled_seen
        if reached(module):
            return
        reach(module, path or type(module).__name__)
        if compiled != "cuda_graphs" and is_compiled(module):
            compiled = "markers"
            compiled_seen += 1
            if cuda_graphs(module):
                compiled = "cuda_graphs"
                if is_optimized(module):
                    regions.append(module)
        if module not in layers and is_candidate(rule, module, path):
            chosen = "include" if rule.include is not None else "class_name"
            if chosen == "include" or len(frontier(rule, module, path)) <= 1:
                name = path or type(module).__name__
                if compiled == "cuda_graphs":
                    found.append(Found(name, "hidden_by_compile",
                                       type(module).__name__ + ", under CUDA graphs (their replays run no marker)"))
                else:
                    host = parent if parent is not None and type(parent).__name__ in FAST_PATH_HOSTS and \
                        parent not in layers else None
                    found.append(Found(name, chosen, layer_source(module, compiled == "markers", host), module, host))
                name_subtree(module, path)
                return
        for child, child_path in children(module, path):
            visit(child, child_path, module, compiled)

    def name_subtree(module, path):
        """A layer's subtree: named (for the SDPA fallback) but searched no further."""
        for child, child_path in children(module, path):
            if not reached(child):
                reach(child, child_path)
                name_subtree(child, child_path)

    visit(root, "", None, None)
    return Walk(names, found, regions, compiled_seen)


def region_name(module, names):
    """A compiled region's name: its path, else its compiled module's."""
    name = names.get(module)
    if name is None or name == type(module).__name__:
        inner = getattr(module, "_orig_mod", module)
        name = names.get(inner) or type(inner).__name__
    return name


def region_source(module):
    """The class a compiled region compiles."""
    return type(getattr(module, "_orig_mod", module)).__name__


def rotary_functions(namespace):
    """The module-level functions of a Python module's namespace named like rotary or RoPE helpers
    (transformers' apply_rotary_pos_emb), that no attach has wrapped yet: (name, function)."""
    return [(name, fn) for name, fn in list(namespace.items())
            if isinstance(fn, types.FunctionType) and ROTARY_FUNCTION.search(name) and
            not getattr(fn, "_attnscope_wrapped", False)]


def may_run_fast_path(module):
    """False when TransformerEncoderLayer.forward refuses its fused fast path for a reason read
    here cheaply (training, grad wanted for the projections, batch_first off). Training then never
    opens the fused hint, whose thread-local callback would see every op of the whole encoder
    layer."""
    if module.training:
        return False
    attn = getattr(module, "self_attn", None)
    if attn is None or not getattr(attn, "batch_first", False):
        return False
    weight = getattr(attn, "in_proj_weight", None)
    return not (torch.is_grad_enabled() and weight is not None and weight.requires_grad)


def sdpa_caller(frame, names, looked_at, depth=8):
    """The module whose code called F.scaled_dot_product_attention, from the frame that called it:
    the nearest frame whose `self` (or, for transformers' attention functions, `module`) is a module
    in `names` (the walked trees'). None when a frame's code is in `looked_at` (looked at before,
    nothing eligible found) or none is found within `depth` frames."""
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code in looked_at:
            return None
        for key in ("self", "module"):
            obj = frame.f_locals.get(key)
            if isinstance(obj, torch.nn.Module) and obj in names:
                return obj
        frame = frame.f_back
    return None


def results(output):
    """What exit_scope needs to hook the call's own autograd nodes (backward without a callback on
    every node, docs/PERFORMANCE.md): the `_cdata` of the result tensors that require grad, from a
    tensor or a tuple or list holding tensors (attention modules return (output, weights) and
    the like; other items are skipped); () when none requires grad (no backward); None when no
    tensor is found in it (backward is then observed through the RecordFunction callback)."""
    if isinstance(output, torch.Tensor):
        return (output._cdata,) if output.requires_grad else ()
    if isinstance(output, (tuple, list)):
        found = None
        for item in output:
            if isinstance(item, torch.Tensor):
                if found is None:
                    found = []
                if item.requires_grad:
                    found.append(item._cdata)
        return found
    return None


def marked(tensors):
    """Which of a call's tensors ((key, tensor) pairs) the compiled-code markers carry: the
    floating-point ones that require grad (so that the backward marker runs once all their
    gradients are done), else the first floating-point one (forward only). Their keys."""
    floating = [i for i, t in tensors if t.is_floating_point()]
    grad = [i for i in floating if dict(tensors)[i].requires_grad]
    return grad or floating[:1]


def tensor_items(output):
    """A module's result as (items, single): the (index, tensor) pairs of a tensor or of a tuple or
    list's tensors, and whether it is one tensor; None for a result that is neither."""
    if isinstance(output, torch.Tensor):
        return [(0, output)], True
    if isinstance(output, (tuple, list)):
        return [(i, o) for i, o in enumerate(output) if isinstance(o, torch.Tensor)], False
    return None

