"""Zero-code attach (launch/attnscope-run puts python/bootstrap on PYTHONPATH, whose sitecustomize
calls install() in every worker before the script runs).

- torch.nn.MultiheadAttention.forward runs inside attnscope.attention(<module name>): the name is
  the module's path in the first module tree that runs it ("layers.0.self_attn"; DDP's "module."
  prefix dropped), so every rank names a layer the same way.
- torch.nn.functional.scaled_dot_product_attention, where the torch version has it, runs inside
  attnscope.attention(<innermost running module's name>.sdpa) when no attention scope is open.
- torch.distributed.init_process_group is followed: once it returns, attnscope forms a Gloo side
  group of its own (torch.distributed.new_group(backend="gloo"), right there, so in the same order
  on every rank) and starts with it, the group's rank and world size, and torchrun's store. Its
  rounds are real Gloo collectives that never touch the job's communicator. A script that forms no
  group starts attnscope at its first attention call. attnscope stops at interpreter exit.
"""
import atexit
import datetime
import os
import sys
import threading
import weakref

import torch

import attnscope

_names = weakref.WeakKeyDictionary()   # module -> its path in the first tree that ran it
_scanned = weakref.WeakSet()           # modules whose subtree has been named
_local = threading.local()             # per thread: running modules, open attention depth
_started = False
_lock = threading.Lock()


def _clean(name):
    return name[len("module."):] if name.startswith("module.") else name


def _ensure_started():
    global _started
    if _started:
        return
    with _lock:
        if _started:
            return
        _started = True
        if attnscope.is_running():
            return  # the script started attnscope itself
        kwargs = {}
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            kwargs = {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
            group = _side_group(dist)
            if group is not None:
                kwargs["group"] = group
        attnscope.start(**kwargs)
        atexit.register(attnscope.stop)


def _option(name):
    value = os.environ.get(name)
    if value is not None:
        return value
    return next(o["default"] for o in attnscope.options() if o["name"] == name)


def _side_group(dist):
    """A Gloo group for attnscope's rounds, or None (one rank, another backend chosen, disabled).
    Collective over the default group: called right after init_process_group on every rank."""
    attnscope.check_config({k: v for k, v in os.environ.items() if k.startswith("ATTNSCOPE_")})
    if dist.get_world_size() < 2 or _option("ATTNSCOPE_ENABLE").lower() in ("0", "false", "off", "no"):
        return None
    if _option("ATTNSCOPE_AGGREGATION") not in ("auto", "gloo"):
        return None
    if not dist.is_gloo_available():
        sys.stderr.write("[attnscope] this torch has no Gloo: ranks aggregate through the store\n")
        return None
    timeout = datetime.timedelta(seconds=float(_option("ATTNSCOPE_ROUND_TIMEOUT_S")))
    try:
        return dist.new_group(backend="gloo", timeout=timeout)
    except Exception as e:  # noqa: BLE001 - the job goes on; attnscope falls back to the store
        sys.stderr.write(f"[attnscope] no Gloo side group ({e}); ranks aggregate through the store\n")
        return None


def _stack():
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def _pre_hook(module, inputs):
    if module not in _scanned:
        for name, m in module.named_modules():
            _scanned.add(m)
            if m not in _names:
                _names[m] = _clean(name) or type(m).__name__
    _stack().append(module)


def _post_hook(module, inputs, output):
    s = _stack()
    while s:
        if s.pop() is module:
            break


def _depth():
    return getattr(_local, "depth", 0)


def _observed(fn, name_of):
    def wrapper(*args, **kwargs):
        _ensure_started()
        name = name_of(args)
        _local.depth = _depth() + 1
        try:
            with attnscope.attention(name):
                return fn(*args, **kwargs)
        finally:
            _local.depth -= 1
    wrapper.__wrapped__ = fn
    wrapper.__doc__ = fn.__doc__
    return wrapper


def install():
    """Instruments torch in this process (idempotent)."""
    if getattr(torch, "_attnscope_attached", False):
        return
    torch._attnscope_attached = True
    mha = torch.nn.MultiheadAttention
    mha.forward = _observed(mha.forward, lambda args: _names.get(args[0], "MultiheadAttention"))
    torch.nn.modules.module.register_module_forward_pre_hook(_pre_hook)
    torch.nn.modules.module.register_module_forward_hook(_post_hook)

    functional = torch.nn.functional
    if hasattr(functional, "scaled_dot_product_attention"):
        sdpa = functional.scaled_dot_product_attention
        observed = _observed(sdpa, lambda args: (_names.get(_stack()[-1], "sdpa") if _stack() else "") + ".sdpa")

        def scaled_dot_product_attention(*args, **kwargs):
            if _depth() > 0:  # already inside an attention scope (e.g. MultiheadAttention)
                return sdpa(*args, **kwargs)
            return observed(*args, **kwargs)
        functional.scaled_dot_product_attention = scaled_dot_product_attention

    dist = torch.distributed
    if dist.is_available():
        init = dist.init_process_group

        def init_process_group(*args, **kwargs):
            result = init(*args, **kwargs)
            _ensure_started()
            return result
        init_process_group.__wrapped__ = init
        dist.init_process_group = init_process_group
        dist.distributed_c10d.init_process_group = init_process_group
