"""attnscope: per-layer attention timing and memory for PyTorch training, across ranks.

    import attnscope
    attnscope.start(sample_every=1, summary_json="/tmp/s-{rank}.json")   # plus ATTNSCOPE_* variables
    with attnscope.attention("layers.0.attn"):
        out = my_attention(x)
    loss.backward()
    attnscope.step()            # optional: otherwise one backward pass is one step
    attnscope.summary()         # this rank's figures as a dict (docs/SUMMARY_JSON.md)
    attnscope.stop()

Options are the ATTNSCOPE_* variables (docs/CONFIGURATION.md) in lower case without the prefix;
keyword arguments override the environment. A bad value raises ValueError with the same text the
C++ API uses, e.g. 'ATTNSCOPE_SAMPLE_EVERY="0" is out of range; allowed: an integer from 1 to 1000000'.
"""
import json
import os

import torch  # noqa: F401  (loads LibTorch before the native module that links it)

import re

from ._attnscope import attention, is_running, op_kind, step, version  # noqa: F401
from . import _attnscope

__all__ = ["start", "stop", "step", "attention", "op_kind", "summary", "is_running", "version", "options",
           "check_config", "config"]

# Variables only Python reads: regular expressions of the module discovery (docs/DISCOVERY.md).
PATTERN_VARIABLES = ("ATTNSCOPE_ATTENTION_MODULES", "ATTNSCOPE_ATTENTION_EXCLUDE")


def compile_pattern(name, value):
    """The compiled pattern of a discovery variable; ValueError naming the variable otherwise."""
    if value is None or value == "":
        return None
    try:
        return re.compile(value)
    except re.error as e:
        raise ValueError(f'{name}="{value}" is not a valid regular expression ({e}); allowed: {_attnscope.variable(name)["allowed"]}') from None


def _checked(parsed):
    for name in PATTERN_VARIABLES:
        compile_pattern(name, parsed[name[len("ATTNSCOPE_"):].lower()])
    return parsed


def check_config(variables):
    """Checks ATTNSCOPE_* variables as start() would (ValueError with the C++ API's text). Returns
    the settings Python acts on, parsed by libattnscope, by keyword: enable, aggregation,
    round_timeout_s, port, bind, attention_modules, attention_exclude."""
    return _checked(_attnscope.check_config(variables))


def config():
    """check_config() of this process's ATTNSCOPE_* variables, read and parsed by libattnscope
    (unknown names are left to start() to warn about)."""
    return _checked(_attnscope.environment_config())


def options():
    """Every option: name (as a keyword), type, default, allowed values, meaning."""
    return [dict(v, keyword=v["name"][len("ATTNSCOPE_"):].lower()) for v in _attnscope.variables()]


def start(rank=None, world_size=None, group=None, **kwargs):
    """Starts observing on this rank. Rank and world size default to the launcher's (torchrun,
    mpirun); pass them when the process group was formed otherwise.

    group: a torch.distributed ProcessGroup made for attnscope alone (never the one the job trains
    on), e.g. torch.distributed.new_group(backend="gloo") called on every rank in the same order;
    attnscope then aggregates with real collectives on it (ATTNSCOPE_AGGREGATION=auto or gloo).
    The zero-code attach makes one after init_process_group. Without one, ranks aggregate through
    the job's store (ATTNSCOPE_AGGREGATION=store, small worlds)."""
    known = {o["keyword"]: o["name"] for o in options()}
    variables = {k: v for k, v in os.environ.items() if k.startswith("ATTNSCOPE_")}
    for key, value in kwargs.items():
        if key not in known:
            raise ValueError(f"attnscope.start(): unknown option {key!r}; allowed: {', '.join(sorted(known))}")
        if isinstance(value, bool):
            value = "1" if value else "0"
        variables[known[key]] = str(value)
    check_config(variables)  # a bad option fails before the group is handed over
    if group is not None:
        # Through the dispatcher, not pybind11: torch's ProcessGroup crosses as its TorchScript
        # object (plugin/src/TorchOps.cpp).
        torch.ops.attnscope.hand_in_group(group.boxed())
    if rank is None and group is not None:
        rank, world_size = group.rank(), group.size()
    _attnscope.start(variables, -1 if rank is None else int(rank), 0 if world_size is None else int(world_size))


def stop():
    """Last aggregation round, summary JSON, final metrics push; releases the metrics port."""
    _attnscope.stop()


def summary():
    """This rank's figures so far (on rank 0 with the cluster section), as the summary JSON's dict."""
    return json.loads(_attnscope.summary_json())
