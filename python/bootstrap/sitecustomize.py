"""Put on PYTHONPATH by launch/attnscope-run: attaches attnscope to an unmodified training script in
each worker (attnscope/_attach.py), then runs the sitecustomize this one shadows, if any."""
import importlib.machinery
import importlib.util
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_chain()
# Workers only: torchrun's own agent process has no RANK.
if os.environ.get("RANK") is not None or os.environ.get("OMPI_COMM_WORLD_RANK") is not None:
    try:
        from attnscope import _attach
        _attach.install()
    except ImportError as e:
        sys.stderr.write(f"[attnscope] zero-code attach unavailable, the script runs without it: {e}\n")
    except ValueError as e:  # a bad ATTNSCOPE_* value: fail at start, before the script runs
        sys.stderr.write(f"[attnscope] error: {e}\n")
        sys.exit(2)
