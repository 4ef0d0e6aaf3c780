"""Zero-code attach: launch/attnscope-run puts python/bootstrap on PYTHONPATH, whose sitecustomize
calls install() in every worker before the script runs. The rule is in docs/DISCOVERY.md.

Discovery. The first time a module tree runs (its root's first call), the tree is walked once and
its attention layers are chosen:
- a module whose class name matches the attention pattern (default `attention|attn`, any case;
  ATTNSCOPE_ATTENTION_MODULES replaces it and is also searched in module paths) is a layer, the
  outermost such module on its path, unless two or more matching modules sit side by side below it
  (then it is a container, and the search goes on inside it); a module the user's include pattern
  matches is a layer whatever it holds;
- ATTNSCOPE_ATTENTION_EXCLUDE removes modules (class name or path) from being layers; their
  children are still searched;
- a torch.nn.TransformerEncoderLayer/DecoderLayer's fast path (one fused op for the whole layer,
  eval without grad) is observed under its self_attn's name;
- F.scaled_dot_product_attention called outside any layer makes the module calling it a layer
  (rule calls_sdpa), from that call on;
- inside torch.compile'd code (torch.compile(module), Module.compile, per-block compile, under
  DDP or FSDP2) the same layers are found: Dynamo traces their hooks into the graph, where they put
  the markers of plugin/src/CompiledMarkers.cpp at each layer's entry and exit, and the markers'
  autograd formulas (there, in C++) mark the same layer in the backward graph (_mark_entry,
  _mark_exit).
Each layer is observed from a forward pre-hook to a forward hook (always_call) on that module only;
the tree walk's global pre-hook stays only for the first few training steps (new roots).
Compilation time (Dynamo's compile callbacks) is reported apart from any call.

Names are module paths with wrappers' segments left out (DDP's and DataParallel's `module`,
torch.compile's `_orig_mod`, FSDP's `_fsdp_wrapped_module`, checkpoint_wrapper's
`_checkpoint_wrapped_module`), so every rank and every wrapping names a layer the same way.

Rotary embeddings: module-level functions named like rotary/rope helpers in the module that defines
a found layer's class (transformers' apply_rotary_pos_emb) run inside op_kind("positional").

torch.distributed.init_process_group is followed: once it returns, attnscope forms a Gloo side group
of its own and starts with it. A script that forms no group starts attnscope at its first attention
call or optimizer step. attnscope stops at interpreter exit.
"""
import atexit
import datetime
import re
import sys
import threading
import time
import types
import warnings
import weakref

import torch

import attnscope
from attnscope import _attnscope

DEFAULT_PATTERN = re.compile(r"attention|attn", re.IGNORECASE)
ROTARY_FUNCTION = re.compile(r"rotary|(^|_)rope($|_)", re.IGNORECASE)
# Wrapper modules whose child is the wrapped model: the child's name is not a path segment.
_WRAPPER_CHILDREN = {"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}
_DATA_PARALLEL = ("DistributedDataParallel", "DataParallel")
_FAST_PATH_HOSTS = ("TransformerEncoderLayer",)  # the decoder layer has no fused fast path

_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)

_names = weakref.WeakKeyDictionary()   # module -> its cleaned path in the first tree that ran it
_scanned = weakref.WeakSet()           # modules whose tree has been walked
_layers = weakref.WeakKeyDictionary()  # module -> layer name (hooks installed)
_region_enter = weakref.WeakKeyDictionary()  # compiled module -> its region's pre-hook
_calls_sdpa_seen = set()               # code objects already looked at by the SDPA fallback
_origins = []                          # (name, rule, source) not yet handed to the session
_local = threading.local()             # per thread: modules whose scope is open, SDPA depth
_state = {"started": False, "include": None, "exclude": None, "discovery_hook": None,
          "optimizer_hook": None, "optimizer_steps": 0, "compiled": 0, "compiling_since": None,
          "compile_seconds": 0.0, "compiles": 0}
_lock = threading.Lock()
_undo = []                             # what uninstall() restores: hook handles, replaced attributes


# --- start ----------------------------------------------------------------------------------------

def _ensure_started():
    if _state["started"]:
        return
    with _lock:
        if _state["started"]:
            return
        _state["started"] = True
        if not attnscope.is_running():  # else the script started attnscope itself
            kwargs = {}
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                kwargs = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
                group = _side_group(dist)
                if group is not None:
                    kwargs["group"] = group
            attnscope.start(**kwargs)
            atexit.register(attnscope.stop)
    _flush_origins()


def _flush_origins():
    if not attnscope.is_running():
        return
    while _origins:
        name, rule, source = _origins.pop(0)
        _attnscope.describe_layer(name, rule, source)
    if _state["compiled"]:
        _attnscope.note_discovery(
            "torch.compile: layers inside compiled code are observed between markers the compiler keeps "
            "at each layer's entry and exit, forward and backward; their op kinds are those of the ops "
            "compiled code calls (matmuls, attention kernels), the time between them compiled_kernels; "
            "compilation time is reported apart (compile_seconds), never as a call")
    if _state["compiles"]:
        _attnscope.note_compile(_state["compile_seconds"], _state["compiles"])
        _state["compile_seconds"], _state["compiles"] = 0.0, 0


def _side_group(dist):
    """A Gloo group for attnscope's rounds, or None (one rank, another backend chosen, disabled).
    Collective over the default group: called right after init_process_group on every rank."""
    config = attnscope.config()  # libattnscope parses the settings, as start() will
    if dist.get_world_size() < 2 or not config["enable"]:
        return None
    if config["aggregation"] not in ("auto", "gloo"):
        return None
    if not dist.is_gloo_available():
        sys.stderr.write("[attnscope] this torch has no Gloo: ranks aggregate through the store\n")
        return None
    timeout = datetime.timedelta(seconds=config["round_timeout_s"])
    try:
        return dist.new_group(backend="gloo", timeout=timeout)
    except Exception as e:  # noqa: BLE001 - the job goes on; attnscope falls back to the store
        sys.stderr.write(f"[attnscope] no Gloo side group ({e}); ranks aggregate through the store\n")
        return None


# --- discovery ------------------------------------------------------------------------------------

def _matches(pattern, module, path):
    return pattern is not None and (pattern.search(type(module).__name__) is not None or
                                    (path != "" and pattern.search(path) is not None))


def _children(module, path):
    """(child, cleaned path) of each direct child, wrapper segments left out."""
    wrapper = type(module).__name__ in _DATA_PARALLEL
    for name, child in module.named_children():
        if name in _WRAPPER_CHILDREN or (wrapper and name == "module"):
            yield child, path
        else:
            yield child, f"{path}.{name}" if path else name


def _is_candidate(module, path):
    """Whether the attention pattern names this module (exclusions applied)."""
    if _matches(_state["exclude"], module, path):
        return False
    if _state["include"] is not None:
        return _matches(_state["include"], module, path)
    return DEFAULT_PATTERN.search(type(module).__name__) is not None


def _frontier(module, path):
    """The candidates below `module` that have no candidate between them and it."""
    found = []
    for child, child_path in _children(module, path):
        if _is_candidate(child, child_path):
            found.append(child)
        else:
            found.extend(_frontier(child, child_path))
    return found


def _is_optimized(module):
    """torch.compile(module)'s wrapper, whatever FSDP2's fully_shard made of its class
    (FSDPOptimizedModule)."""
    optimized = getattr(getattr(torch, "_dynamo", None), "OptimizedModule", None)
    return (optimized is not None and isinstance(module, optimized)) or type(module).__name__ == "OptimizedModule"


def _cuda_graphs(module):
    """Whether a torch.compile'd module replays CUDA graphs (mode "reduce-overhead" or
    "max-autotune", option triton.cudagraphs): a replay runs none of the markers' host code, so
    its layers cannot be seen one by one."""
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


def _walk(module, path, parent=None, compiled=None):
    """Chooses the layers of a tree. Layers under compiled code are observed through the markers
    their hooks put into the compiled graph (`compiled` "markers"); under a module that replays
    CUDA graphs ("cuda_graphs") they are hidden, and the compiled module is observed as one
    region instead (rule compiled_region, the fallback)."""
    if module in _scanned:
        return
    _scanned.add(module)
    _names.setdefault(module, path or type(module).__name__)
    if compiled != "cuda_graphs" and (_is_optimized(module) or getattr(module, "_compiled_call_impl", None) is not None):
        compiled = "markers"
        _state["compiled"] += 1
        if _cuda_graphs(module):
            compiled = "cuda_graphs"
            if _is_optimized(module):
                _observe_compiled(module)
    if module not in _layers and _is_candidate(module, path):
        rule = "include" if _state["include"] is not None else "class_name"
        if rule == "include" or len(_frontier(module, path)) <= 1:
            if compiled == "cuda_graphs":
                _origins.append((path or type(module).__name__, "hidden_by_compile",
                                 type(module).__name__ + ", under CUDA graphs (their replays run no marker)"))
            else:
                _add_layer(module, path, rule, parent, compiled == "markers")
            _mark_scanned(module, path)
            return
    for child, child_path in _children(module, path):
        _walk(child, child_path, module, compiled)


def _mark_scanned(module, path):
    """A layer's subtree: named (for the SDPA fallback) but searched no further."""
    for child, child_path in _children(module, path):
        if child not in _scanned:
            _scanned.add(child)
            _names.setdefault(child, child_path)
            _mark_scanned(child, child_path)


def _add_layer(module, path, rule, parent=None, compiled=False):
    name = path or type(module).__name__
    _layers[module] = name
    # Read by the hooks while Dynamo traces them: a plain attribute, a constant in the graph.
    module._attnscope_layer = name
    _undo.append(module.register_forward_pre_hook(_layer_enter, with_kwargs=True))
    _undo.append(module.register_forward_hook(_layer_exit, with_kwargs=True, always_call=True))
    source = type(module).__name__ + (", in compiled code (markers)" if compiled else "")
    if parent is not None and type(parent).__name__ in _FAST_PATH_HOSTS and parent not in _layers:
        # Eval without grad runs the whole encoder layer as one fused op, never calling self_attn.
        _undo.append(parent.register_forward_pre_hook(_fused_enter(name)))
        _undo.append(parent.register_forward_hook(_fused_exit, always_call=True))
        source += f", and {type(parent).__name__}'s fast path"
    _origins.append((name, rule, source))
    _mark_rotary(type(module))
    _flush_origins()


def _mark_rotary(cls):
    module = sys.modules.get(cls.__module__)
    if module is None or getattr(module, "_attnscope_rotary_marked", False):
        return
    try:
        module._attnscope_rotary_marked = True
    except (AttributeError, TypeError):
        return
    for name, fn in list(vars(module).items()):
        if isinstance(fn, types.FunctionType) and ROTARY_FUNCTION.search(name) and \
                not getattr(fn, "_attnscope_wrapped", False):
            _replace(module, name, _positional(fn))


def _positional(fn):
    def wrapper(*args, **kwargs):
        if _is_compiling():
            return fn(*args, **kwargs)
        with attnscope.op_kind("positional"):
            return fn(*args, **kwargs)
    wrapper.__wrapped__ = fn
    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    wrapper.__doc__ = fn.__doc__
    wrapper._attnscope_wrapped = True
    return wrapper


# --- hooks ----------------------------------------------------------------------------------------

def _open_modules():
    s = getattr(_local, "open", None)
    if s is None:
        s = _local.open = []
    return s


def _layer_enter(module, args, kwargs):
    if _is_compiling():
        return _mark_entry(module, args, kwargs)
    _ensure_started()
    _attnscope.enter_scope(_layers[module], False)
    _open_modules().append(module)


def _results(output):
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


def _layer_exit(module, args, kwargs, output):
    if _is_compiling():
        return _mark_exit(module, args, kwargs, output)
    s = _open_modules()
    if s and s[-1] is module:
        s.pop()
        _attnscope.exit_scope(_results(output))


# --- markers in compiled code (traced by Dynamo; docs/DISCOVERY.md) --------------------------------

def _marked(tensors):
    """Which of a call's tensors the markers carry: the floating-point ones that require grad (so
    that the backward marker runs once all their gradients are done), else the first floating-point
    one (forward only)."""
    floating = [i for i, t in tensors if t.is_floating_point()]
    grad = [i for i in floating if dict(tensors)[i].requires_grad]
    return grad or floating[:1]


def _mark_entry(module, args, kwargs):
    """Pre-hook while Dynamo traces: the layer's tensor arguments go through layer_enter."""
    found = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    keys = _marked(found)
    if not keys:
        return None
    by_key = dict(found)
    marked = torch.ops.attnscope.layer_enter([by_key[k] for k in keys], module._attnscope_layer)
    args, kwargs = list(args), dict(kwargs)
    for k, t in zip(keys, marked):
        if isinstance(k, int):
            args[k] = t
        else:
            kwargs[k] = t
    return tuple(args), kwargs


def _mark_exit(module, args, kwargs, output):
    """Forward hook while Dynamo traces: the layer's tensor results go through layer_exit, whose
    backward opens the layer's backward when its inputs carry gradients (layer_enter's backward
    closes it)."""
    if isinstance(output, torch.Tensor):
        items, single = [(0, output)], True
    elif isinstance(output, (tuple, list)):
        items, single = [(i, o) for i, o in enumerate(output) if isinstance(o, torch.Tensor)], False
    else:
        return None
    keys = _marked(items)
    if not keys:
        return None
    backward = any(isinstance(a, torch.Tensor) and a.requires_grad for a in list(args) + list(kwargs.values()))
    by_key = dict(items)
    marked = torch.ops.attnscope.layer_exit([by_key[k] for k in keys], module._attnscope_layer, backward)
    if single:
        return marked[0]
    out = list(output)
    for k, t in zip(keys, marked):
        out[k] = t
    return tuple(out) if isinstance(output, tuple) else out


def _watch_compiles():
    """Dynamo's compile callbacks time compilation, from the first compiled tree on. Not at install:
    importing torch._dynamo in every process before the script's own imports made jobs hang in
    destroy_process_group (a Gloo work's thread-local state then held a Python object whose release
    waits for the GIL the destroying thread holds)."""
    if _state.get("watching_compiles"):
        return
    _state["watching_compiles"] = True
    callbacks = torch._dynamo.callback_handler
    callbacks.register_start_callback(_compile_started)
    callbacks.register_end_callback(_compile_ended)
    _undo.append(_Undo(lambda: callbacks.remove_start_callback(_compile_started)))
    _undo.append(_Undo(lambda: callbacks.remove_end_callback(_compile_ended)))
    _undo.append(_Undo(lambda: _state.pop("watching_compiles", None)))


def _compile_started(args):
    if _state["compiling_since"] is None:
        _state["compiling_since"] = time.perf_counter()


def _compile_ended(args):
    since = _state["compiling_since"]
    if since is None:
        return
    _state["compiling_since"] = None
    _state["compile_seconds"] += time.perf_counter() - since
    _state["compiles"] += 1
    try:
        _flush_origins()
    except Exception as e:  # noqa: BLE001 - never the job's compilation's failure
        sys.stderr.write(f"[attnscope] compile time not reported: {e!r}\n")


def _may_run_fast_path(module):
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


def _fused_enter(name):
    def hook(module, args):
        if _is_compiling() or not _may_run_fast_path(module):
            return
        _ensure_started()
        _attnscope.enter_fused(name)
        _open_modules().append(module)
    return hook


def _fused_exit(module, args, output):
    if _is_compiling():
        return
    s = _open_modules()
    if s and s[-1] is module:
        s.pop()
        _attnscope.exit_fused()


def _discover(module, args):
    """Global forward pre-hook while discovery runs: walks each new tree at its root's first call."""
    if _is_compiling() or module in _scanned:
        return
    _walk(module, "")
    if _state["compiled"]:
        _compiled_tree_walked()
    # This call's hooks were gathered before the walk added the root's own: open its scope here
    # (its forward hook, read after forward, closes it).
    if module in _layers:
        _layer_enter(module, args, {})
    elif module in _region_enter:
        _region_enter[module](module, args)


def _compiled_tree_walked():
    """A tree with compiled code was walked, before its compiled code first runs. Dynamo guards on
    the global forward hooks its graphs ran under (`len(_global_forward_pre_hooks) == 1`): the
    discovery hook goes now, before anything is compiled, rather than after the third optimizer
    step, which would recompile every graph. Roots that first run later are not searched."""
    _end_discovery()
    _watch_compiles()
    _ensure_started()  # the markers record into the session from the compiled code's first run


def _end_discovery():
    handle = _state["discovery_hook"]
    if handle is not None:
        handle.remove()
        _state["discovery_hook"] = None


def _optimizer_step(optimizer, args, kwargs):
    """Global optimizer step hook for the first steps: the nothing-found check, then the end of
    the tree walk's global hook (roots that first run later are not searched)."""
    _state["optimizer_steps"] += 1
    if _state["optimizer_steps"] < _attnscope.NOTHING_FOUND_STEPS:
        return
    _ensure_started()
    _attnscope.note_steps(_state["optimizer_steps"])
    _end_discovery()
    handle = _state["optimizer_hook"]
    if handle is not None:
        handle.remove()
        _state["optimizer_hook"] = None


def _region_origin(module):
    """The first entry of a compiled region records it (its path is known by then)."""
    if getattr(module, "_attnscope_region", False) == "recorded":
        return
    module._attnscope_region = "recorded"
    _state["compiled"] += 1
    _origins.append((_region_name(module), "compiled_region", type(getattr(module, "_orig_mod", module)).__name__))
    _flush_origins()


def _compiled_region(name_of):
    def enter(module, args):
        if _is_compiling():
            return
        _ensure_started()
        _region_origin(module)
        _attnscope.enter_scope(name_of(module), True)
        _open_modules().append(module)

    def leave(module, args, output):  # a region closes like a layer; its hook has no kwargs
        return _layer_exit(module, args, {}, output)
    return enter, leave


def _region_name(module):
    name = _names.get(module)
    if name is None or name == type(module).__name__:
        inner = getattr(module, "_orig_mod", module)
        name = _names.get(inner) or type(inner).__name__
    return name


def _observe_compiled(module):
    if getattr(module, "_attnscope_region", False):
        return
    module._attnscope_region = True
    enter, leave = _compiled_region(_region_name)
    _region_enter[module] = enter
    _undo.append(module.register_forward_pre_hook(enter))
    _undo.append(module.register_forward_hook(leave, always_call=True))


def _sdpa_caller():
    """The module whose code called F.scaled_dot_product_attention: the nearest frame whose `self`
    (or, for transformers' attention functions, `module`) is a module of a walked tree."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        code = frame.f_code
        if code in _calls_sdpa_seen:
            return None  # looked at before and nothing eligible found
        for key in ("self", "module"):
            obj = frame.f_locals.get(key)
            if isinstance(obj, torch.nn.Module) and obj in _names:
                return obj
        frame = frame.f_back
    return None


def install():
    """Instruments torch in this process (idempotent). Raises ValueError for a bad ATTNSCOPE_* value
    (a discovery pattern among them)."""
    if getattr(torch, "_attnscope_attached", False):
        return
    config = attnscope.config()
    _state["include"] = attnscope.compile_pattern("ATTNSCOPE_ATTENTION_MODULES", config["attention_modules"])
    _state["exclude"] = attnscope.compile_pattern("ATTNSCOPE_ATTENTION_EXCLUDE", config["attention_exclude"])
    torch._attnscope_attached = True
    _state["discovery_hook"] = torch.nn.modules.module.register_module_forward_pre_hook(_discover)
    _state["optimizer_steps"] = 0
    # Our own discovery hook is the global hook OptimizedModule warns about; it runs once per tree.
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
    from torch.optim.optimizer import register_optimizer_step_post_hook
    _state["optimizer_hook"] = register_optimizer_step_post_hook(_optimizer_step)

    functional = torch.nn.functional
    sdpa = functional.scaled_dot_product_attention

    def scaled_dot_product_attention(*args, **kwargs):
        if _is_compiling() or _open_modules():
            return sdpa(*args, **kwargs)
        caller = _sdpa_caller()
        if caller is None or caller in _layers or _matches(_state["exclude"], caller, _names.get(caller, "")):
            if caller is None:
                _calls_sdpa_seen.add(sys._getframe(1).f_code)
            return sdpa(*args, **kwargs)
        # From the next call on the caller's hooks open the scope; this call is observed here.
        _add_layer(caller, _names[caller], "calls_sdpa")
        _ensure_started()
        _attnscope.enter_scope(_layers[caller], False)
        result = None
        try:
            result = sdpa(*args, **kwargs)
            return result
        finally:
            _attnscope.exit_scope(_results(result))
    scaled_dot_product_attention.__wrapped__ = sdpa
    scaled_dot_product_attention.__doc__ = sdpa.__doc__
    _replace(functional, "scaled_dot_product_attention", scaled_dot_product_attention)

    module_compile = torch.nn.Module.compile

    def compile(self, *args, **kwargs):  # Module.compile: in place, no OptimizedModule
        module_compile(self, *args, **kwargs)
        compiled = self._compiled_call_impl
        owner = weakref.ref(self)
        mode = kwargs.get("mode") or ""
        options = dict(kwargs.get("options") or {})
        options.setdefault("triton.cudagraphs", mode in ("reduce-overhead", "max-autotune"))
        self._attnscope_compile_options = options

        def walked(*a, **k):
            # The compiled call runs the module's hooks, the global discovery hook included, inside
            # compiled code: the tree is walked here, before it, so that its layers' hooks are traced.
            module = owner()
            if module is not None and module not in _scanned and _state["discovery_hook"] is not None:
                _walk(module, "")
                _compiled_tree_walked()
            return compiled(*a, **k)
        if not options["triton.cudagraphs"]:
            self._compiled_call_impl = walked
            return

        def region(*a, **k):
            if _is_compiling():
                return compiled(*a, **k)
            module = owner()
            _ensure_started()
            _region_origin(module)
            _attnscope.enter_scope(_region_name(module), True)
            result = None
            try:
                result = compiled(*a, **k)
                return result
            finally:
                _attnscope.exit_scope(_results(result))
        self._compiled_call_impl = region
        self._attnscope_region = True
    compile.__wrapped__ = module_compile
    compile.__doc__ = module_compile.__doc__
    _replace(torch.nn.Module, "compile", compile)

    dist = torch.distributed
    if dist.is_available():
        init = dist.init_process_group

        def init_process_group(*args, **kwargs):
            result = init(*args, **kwargs)
            _ensure_started()
            return result
        init_process_group.__wrapped__ = init
        _replace(dist, "init_process_group", init_process_group)
        _replace(dist.distributed_c10d, "init_process_group", init_process_group)


class _Undo:
    """An undo step with a hook handle's remove()."""

    def __init__(self, remove):
        self.remove = remove


def _replace(owner, name, value):
    _undo.append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


def uninstall():
    """Takes every hook and replaced function out again (benchmarks compare with and without the
    attach in one process). attnscope itself is not stopped; layers found so far are forgotten."""
    if not getattr(torch, "_attnscope_attached", False):
        return
    _end_discovery()
    if _state["optimizer_hook"] is not None:
        _state["optimizer_hook"].remove()
        _state["optimizer_hook"] = None
    while _undo:
        item = _undo.pop()
        if isinstance(item, tuple):
            owner, name, value = item
            setattr(owner, name, value)
            if hasattr(owner, "_attnscope_rotary_marked"):
                del owner._attnscope_rotary_marked
        else:
            item.remove()
    for table in (_names, _layers, _region_enter):
        table.clear()
    _scanned.clear()
    _calls_sdpa_seen.clear()
    torch._attnscope_attached = False
