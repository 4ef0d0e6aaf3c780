"""Zero-code attach: launch/attnscope-run puts python/bootstrap on PYTHONPATH, whose sitecustomize
calls install() in every worker before the script runs. The rule is in docs/DISCOVERY.md; its
decisions are the functions of _discovery.py, and this module acts on them: one `Attachment` per
process holds every hook it registered, what it found and what it has yet to report.

Discovery. The first time a module tree runs (its root's first call), the tree is walked once and
its attention layers are chosen (_discovery.walk):
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
import functools
import sys
import threading
import time
import warnings
import weakref

import torch

import attnscope
from attnscope import _attnscope
from attnscope import _discovery
from attnscope._discovery import results as _results

_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)

COMPILED_NOTE = (
    "torch.compile: layers inside compiled code are observed between markers the compiler keeps "
    "at each layer's entry and exit, forward and backward; their op kinds are those of the ops "
    "compiled code calls (matmuls, attention kernels), the time between them compiled_kernels; "
    "compilation time is reported apart (compile_seconds), never as a call")

_attachment = None  # this process's Attachment while installed


# --- the public API: one attachment per process ---------------------------------------------------

def install():
    """Instruments torch in this process (idempotent). Raises ValueError for a bad ATTNSCOPE_* value
    (a discovery pattern among them)."""
    global _attachment
    if getattr(torch, "_attnscope_attached", False):
        return
    attachment = Attachment.from_environment()
    attachment.install()
    _attachment = attachment


def uninstall():
    """Takes every hook and replaced function out again (benchmarks compare with and without the
    attach in one process). attnscope itself is not stopped; layers found so far are forgotten, and
    a later install() attaches afresh."""
    global _attachment
    if _attachment is not None:
        _attachment.uninstall()
    _attachment = None


def close():
    """uninstall(), then stop() the session the attach started, if it started one."""
    global _attachment
    if _attachment is not None:
        _attachment.close()
    _attachment = None


def attachment():
    """This process's Attachment while installed, else None."""
    return _attachment


# --- the attachment -------------------------------------------------------------------------------

class Attachment:
    """The attach of one process: the hooks and replaced functions it installed (undone by
    uninstall), the discovery's findings, the session's start, the compile clock.

    Lifecycle: install() registers the global discovery and optimizer hooks and replaces
    F.scaled_dot_product_attention, Module.compile and init_process_group; the first module tree
    to run is walked (_discovery.walk) and its layers hooked; the session starts after
    init_process_group returns, else at the first layer call or optimizer step; uninstall() undoes
    install(); close() also stops the session if this attachment started it."""

    def __init__(self, rule, config):
        self.rule = rule                                # _discovery.Rule: include, exclude
        self.config = config                            # the settings libattnscope parsed at install
        self.names = weakref.WeakKeyDictionary()        # module -> cleaned path, first tree that ran it
        self.walked = weakref.WeakSet()                 # modules whose tree has been walked
        self.layers = weakref.WeakKeyDictionary()       # module -> layer name (hooks installed)
        self.regions = weakref.WeakSet()                # compiled modules observed whole (the fallback)
        self.sdpa_looked_at = set()                     # code objects the SDPA fallback found no module in
        self.origins = []                               # (name, rule, source) not yet handed to the session
        self.local = threading.local()                  # per thread: modules whose scope is open
        self.start_lock = threading.Lock()
        self.started = False                            # the session started, or found running
        self.started_session = False                    # ... and started by this attachment
        self.discovery_hook = None                      # the global forward pre-hook, while discovery runs
        self.optimizer_hook = None                      # the global optimizer step hook, for the first steps
        self.optimizer_steps = 0
        self.compiled = 0                               # compiled modules and regions met
        self.watching_compiles = False
        self.compiling_since = None
        self.compile_seconds = 0.0                      # not yet reported
        self.compiles = 0                               # not yet reported
        self.undo = []                                  # hook handles and (owner, name, value) replaced

    @classmethod
    def from_environment(cls):
        """An attachment for this process's ATTNSCOPE_* variables, parsed by libattnscope; only the
        discovery patterns, Python regular expressions, are compiled here (ValueError naming the
        variable)."""
        config = _attnscope.environment_config()
        rule = _discovery.Rule(
            include=attnscope.compile_pattern("ATTNSCOPE_ATTENTION_MODULES", config["attention_modules"]),
            exclude=attnscope.compile_pattern("ATTNSCOPE_ATTENTION_EXCLUDE", config["attention_exclude"]))
        return cls(rule, config)

    # --- lifecycle --------------------------------------------------------------------------------

    def install(self):
        torch._attnscope_attached = True
        self.discovery_hook = torch.nn.modules.module.register_module_forward_pre_hook(self._discover)
        self.optimizer_steps = 0
        # Our own discovery hook is the global hook OptimizedModule warns about; it runs once per tree.
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        from torch.optim.optimizer import register_optimizer_step_post_hook
        self.optimizer_hook = register_optimizer_step_post_hook(self._optimizer_step)
        self._wrap_sdpa()
        self._wrap_module_compile()
        self._wrap_init_process_group()

    def uninstall(self):
        if not getattr(torch, "_attnscope_attached", False):
            return
        self.end_discovery()
        if self.optimizer_hook is not None:
            self.optimizer_hook.remove()
            self.optimizer_hook = None
        while self.undo:
            item = self.undo.pop()
            if isinstance(item, tuple):
                owner, name, value = item
                setattr(owner, name, value)
                if hasattr(owner, "_attnscope_rotary_marked"):
                    del owner._attnscope_rotary_marked
            else:
                item.remove()
        for table in (self.names, self.layers):
            table.clear()
        self.walked.clear()
        self.regions.clear()
        self.sdpa_looked_at.clear()
        self.watching_compiles = False
        torch._attnscope_attached = False

    def close(self):
        self.uninstall()
        if self.started_session:
            attnscope.stop()

    def _replace(self, owner, name, value):
        self.undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # --- the session --------------------------------------------------------------------------------

    def ensure_started(self):
        if self.started:
            return
        with self.start_lock:
            if self.started:
                return
            self.started = True
            if not attnscope.is_running():  # else the script started attnscope itself
                kwargs = {}
                dist = torch.distributed
                if dist.is_available() and dist.is_initialized():
                    kwargs = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
                    group = _side_group(dist, self.config)
                    if group is not None:
                        kwargs["group"] = group
                attnscope.start(**kwargs)
                self.started_session = True
                atexit.register(attnscope.stop)
        self.flush()

    def flush(self):
        """Hands what was found, and compile time, to the running session."""
        if not attnscope.is_running():
            return
        while self.origins:
            name, rule, source = self.origins.pop(0)
            _attnscope.describe_layer(name, rule, source)
        if self.compiled:
            _attnscope.note_discovery(COMPILED_NOTE)
        if self.compiles:
            _attnscope.note_compile(self.compile_seconds, self.compiles)
            self.compile_seconds, self.compiles = 0.0, 0

    # --- discovery ----------------------------------------------------------------------------------

    def _discover(self, module, args):
        """Global forward pre-hook while discovery runs: walks each new tree at its root's first call."""
        if _is_compiling() or module in self.walked:
            return
        self.walk(module)
        if self.compiled:
            self._compiled_tree_walked()
        # This call's hooks were gathered before the walk added the root's own: open its scope here
        # (its forward hook, read after forward, closes it).
        if module in self.layers:
            self._layer_enter(module, args, {})
        elif module in self.regions:
            self._region_enter(module, args)

    def walk(self, root):
        """Walks the tree under `root` and acts on what the rule decided: names kept, layers hooked,
        hidden layers and regions recorded."""
        walk = _discovery.walk(root, self.rule, self.walked, self.layers)
        for module, path in walk.names:
            self.walked.add(module)
            self.names.setdefault(module, path)
        self.compiled += walk.compiled
        for module in walk.regions:
            self._observe_region(module)
        for found in walk.found:
            if found.module is None:
                self.origins.append((found.name, found.rule, found.source))
            else:
                self._add_layer(found.module, found.name, found.rule, found.source, found.host)

    def _add_layer(self, module, name, rule, source, host=None):
        self.layers[module] = name
        # Read by the hooks while Dynamo traces them: a plain attribute, a constant in the graph.
        module._attnscope_layer = name
        self.undo.append(module.register_forward_pre_hook(self._layer_enter, with_kwargs=True))
        self.undo.append(module.register_forward_hook(self._layer_exit, with_kwargs=True, always_call=True))
        if host is not None:
            # Eval without grad runs the whole encoder layer as one fused op, never calling self_attn.
            self.undo.append(host.register_forward_pre_hook(functools.partial(self._fused_enter, name)))
            self.undo.append(host.register_forward_hook(self._fused_exit, always_call=True))
        self.origins.append((name, rule, source))
        self._mark_rotary(type(module))
        self.flush()

    def _mark_rotary(self, cls):
        module = sys.modules.get(cls.__module__)
        if module is None or getattr(module, "_attnscope_rotary_marked", False):
            return
        try:
            module._attnscope_rotary_marked = True
        except (AttributeError, TypeError):
            return
        for name, fn in _discovery.rotary_functions(vars(module)):
            self._replace(module, name, _positional(fn))

    def _compiled_tree_walked(self):
        """A tree with compiled code was walked, before its compiled code first runs. Dynamo guards on
        the global forward hooks its graphs ran under (`len(_global_forward_pre_hooks) == 1`): the
        discovery hook goes now, before anything is compiled, rather than after the third optimizer
        step, which would recompile every graph. Roots that first run later are not searched."""
        self.end_discovery()
        self._watch_compiles()
        self.ensure_started()  # the markers record into the session from the compiled code's first run

    def end_discovery(self):
        """Removes the tree walk's global hook: roots that first run later are not searched."""
        if self.discovery_hook is not None:
            self.discovery_hook.remove()
            self.discovery_hook = None

    def _optimizer_step(self, optimizer, args, kwargs):
        """Global optimizer step hook for the first steps: the nothing-found check, then the end of
        the tree walk's global hook (roots that first run later are not searched)."""
        self.optimizer_steps += 1
        if self.optimizer_steps < _attnscope.NOTHING_FOUND_STEPS:
            return
        self.ensure_started()
        _attnscope.note_steps(self.optimizer_steps)
        self.end_discovery()
        if self.optimizer_hook is not None:
            self.optimizer_hook.remove()
            self.optimizer_hook = None

    # --- layer hooks --------------------------------------------------------------------------------

    def _open_modules(self):
        s = getattr(self.local, "open", None)
        if s is None:
            s = self.local.open = []
        return s

    def _layer_enter(self, module, args, kwargs):
        if _is_compiling():
            return _mark_entry(module, args, kwargs)
        self.ensure_started()
        _attnscope.enter_scope(self.layers[module], False)
        self._open_modules().append(module)

    def _layer_exit(self, module, args, kwargs, output):
        """Closes a layer's scope, and a region's (whose hook has no kwargs)."""
        if _is_compiling():
            return _mark_exit(module, args, kwargs, output)
        s = self._open_modules()
        if s and s[-1] is module:
            s.pop()
            _attnscope.exit_scope(_results(output))

    def _region_exit(self, module, args, output):
        return self._layer_exit(module, args, {}, output)

    def _fused_enter(self, name, module, args):
        if _is_compiling() or not _discovery.may_run_fast_path(module):
            return
        self.ensure_started()
        _attnscope.enter_fused(name)
        self._open_modules().append(module)

    def _fused_exit(self, module, args, output):
        if _is_compiling():
            return
        s = self._open_modules()
        if s and s[-1] is module:
            s.pop()
            _attnscope.exit_fused()

    def _in_scope(self, name, compiled, fn, args, kwargs):
        """fn(*args, **kwargs) as one call of layer `name` (a region when `compiled`), closed with
        its results, or by the exception it raises."""
        _attnscope.enter_scope(name, compiled)
        result = None
        try:
            result = fn(*args, **kwargs)
            return result
        finally:
            _attnscope.exit_scope(_results(result))

    # --- compiled code ------------------------------------------------------------------------------

    def _observe_region(self, module):
        """A compiled module that replays CUDA graphs, observed as one region from its hooks."""
        if getattr(module, "_attnscope_region", False):
            return
        module._attnscope_region = True
        self.regions.add(module)
        self.undo.append(module.register_forward_pre_hook(self._region_enter))
        self.undo.append(module.register_forward_hook(self._region_exit, always_call=True))

    def _region_enter(self, module, args):
        if _is_compiling():
            return
        self.ensure_started()
        self._region_origin(module)
        _attnscope.enter_scope(_discovery.region_name(module, self.names), True)
        self._open_modules().append(module)

    def _region_origin(self, module):
        """The first entry of a compiled region records it (its path is known by then)."""
        if getattr(module, "_attnscope_region", False) == "recorded":
            return
        module._attnscope_region = "recorded"
        self.compiled += 1
        self.origins.append((_discovery.region_name(module, self.names), "compiled_region",
                             _discovery.region_source(module)))
        self.flush()

    def _watch_compiles(self):
        """Dynamo's compile callbacks time compilation, from the first compiled tree on. Not at install:
        importing torch._dynamo in every process before the script's own imports made jobs hang in
        destroy_process_group (a Gloo work's thread-local state then held a Python object whose release
        waits for the GIL the destroying thread holds)."""
        if self.watching_compiles:
            return
        self.watching_compiles = True
        callbacks = torch._dynamo.callback_handler
        callbacks.register_start_callback(self._compile_started)
        callbacks.register_end_callback(self._compile_ended)
        self.undo.append(_Undo(lambda: callbacks.remove_start_callback(self._compile_started)))
        self.undo.append(_Undo(lambda: callbacks.remove_end_callback(self._compile_ended)))

    def _compile_started(self, args):
        if self.compiling_since is None:
            self.compiling_since = time.perf_counter()

    def _compile_ended(self, args):
        since = self.compiling_since
        if since is None:
            return
        self.compiling_since = None
        self.compile_seconds += time.perf_counter() - since
        self.compiles += 1
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001 - never the job's compilation's failure
            sys.stderr.write(f"[attnscope] compile time not reported: {e!r}\n")

    # --- replaced functions -------------------------------------------------------------------------

    def _wrap_sdpa(self):
        functional = torch.nn.functional
        sdpa = functional.scaled_dot_product_attention

        def scaled_dot_product_attention(*args, **kwargs):
            if _is_compiling() or self._open_modules():
                return sdpa(*args, **kwargs)
            caller = _discovery.sdpa_caller(sys._getframe(1), self.names, self.sdpa_looked_at)
            if caller is None or caller in self.layers or \
                    _discovery.matches(self.rule.exclude, caller, self.names.get(caller, "")):
                if caller is None:
                    self.sdpa_looked_at.add(sys._getframe(1).f_code)
                return sdpa(*args, **kwargs)
            # From the next call on the caller's hooks open the scope; this call is observed here.
            self._add_layer(caller, self.names[caller], "calls_sdpa", _discovery.layer_source(caller))
            self.ensure_started()
            return self._in_scope(self.layers[caller], False, sdpa, args, kwargs)
        scaled_dot_product_attention.__wrapped__ = sdpa
        scaled_dot_product_attention.__doc__ = sdpa.__doc__
        self._replace(functional, "scaled_dot_product_attention", scaled_dot_product_attention)

    def _wrap_module_compile(self):
        module_compile = torch.nn.Module.compile
        attachment = self

        def compile(self, *args, **kwargs):  # Module.compile: in place, no OptimizedModule
            module_compile(self, *args, **kwargs)
            attachment._compiled_in_place(self, kwargs)
        compile.__wrapped__ = module_compile
        compile.__doc__ = module_compile.__doc__
        self._replace(torch.nn.Module, "compile", compile)

    def _compiled_in_place(self, module, kwargs):
        """After Module.compile(**kwargs): the compiled call walks the tree first (markers), or is
        observed as one region (CUDA graphs)."""
        compiled = module._compiled_call_impl
        owner = weakref.ref(module)
        mode = kwargs.get("mode") or ""
        options = dict(kwargs.get("options") or {})
        options.setdefault("triton.cudagraphs", mode in ("reduce-overhead", "max-autotune"))
        module._attnscope_compile_options = options

        def walked(*a, **k):
            # The compiled call runs the module's hooks, the global discovery hook included, inside
            # compiled code: the tree is walked here, before it, so that its layers' hooks are traced.
            module = owner()
            if module is not None and module not in self.walked and self.discovery_hook is not None:
                self.walk(module)
                self._compiled_tree_walked()
            return compiled(*a, **k)

        def region(*a, **k):
            if _is_compiling():
                return compiled(*a, **k)
            module = owner()
            self.ensure_started()
            self._region_origin(module)
            return self._in_scope(_discovery.region_name(module, self.names), True, compiled, a, k)
        if options["triton.cudagraphs"]:
            module._compiled_call_impl = region
            module._attnscope_region = True
        else:
            module._compiled_call_impl = walked

    def _wrap_init_process_group(self):
        dist = torch.distributed
        if not dist.is_available():
            return
        init = dist.init_process_group

        def init_process_group(*args, **kwargs):
            result = init(*args, **kwargs)
            self.ensure_started()
            return result
        init_process_group.__wrapped__ = init
        self._replace(dist, "init_process_group", init_process_group)
        self._replace(dist.distributed_c10d, "init_process_group", init_process_group)


class _Undo:
    """An undo step with a hook handle's remove()."""

    def __init__(self, remove):
        self.remove = remove


def _side_group(dist, config):
    """A Gloo group for attnscope's rounds, or None (one rank, another backend chosen, disabled).
    Collective over the default group: called right after init_process_group on every rank."""
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


def _positional(fn):
    """fn run inside op_kind("positional") (rotary embeddings), except in compiled code."""
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


# --- markers in compiled code (traced by Dynamo; docs/DISCOVERY.md) --------------------------------

def _mark_entry(module, args, kwargs):
    """Pre-hook while Dynamo traces: the layer's tensor arguments go through layer_enter."""
    found = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    found += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    keys = _discovery.marked(found)
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
    items = _discovery.tensor_items(output)
    if items is None:
        return None
    items, single = items
    keys = _discovery.marked(items)
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
