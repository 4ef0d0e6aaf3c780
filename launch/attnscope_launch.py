"""The launch tooling shared by launch/torchrun and launch/attnscope-run.

fix_torchrun(): Debian's torchrun (PyTorch 1.13) crashes on Python 3.11 before it starts a single
worker: torch.distributed.elastic.multiprocessing.api.Std.from_str returns None for "0" (Std(0) is
not "in Std" on 3.11), and the launcher then fails on the redirects/tee arguments. When that bug is
present, Std.from_str is replaced with a correct version in this process only; on a torchrun that
works nothing changes.

attnscope_run(argv): torchrun with attnscope set up for every rank (launch/attnscope-run --help).

The same file is launch/attnscope_launch.py in a checkout and the top-level module attnscope_launch
of a `pip install .` (whose console scripts attnscope-run and attnscope-torchrun call main() and
torchrun_entry()).
"""
import datetime
import os
import re
import shutil
import socket
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def use_checkout_python(script):
    """Re-runs `script` under the checkout's .venv (launch/install-deps makes it, with PyTorch 2.x)
    when the Python running it has no torch 2.x: the launcher and its workers need the torch that
    attnscope was built for. Does nothing otherwise."""
    venv = os.path.join(ROOT, ".venv")
    python = os.path.join(venv, "bin", "python")
    try:
        import torch
        usable = int(torch.__version__.split(".")[0]) >= 2
    except ImportError:
        usable = False
    # A venv's python is often a link to the base interpreter: compare environments, not binaries.
    if not usable and os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python, os.path.abspath(script)] + sys.argv[1:])


def fix_torchrun():
    from torch.distributed.elastic.multiprocessing import api

    def from_str(cls, vm):
        if re.fullmatch(r"[0-3]", vm):
            return cls(int(vm))
        result = {}
        for mapping in vm.split(","):
            index, value = mapping.split(":")
            result[int(index)] = cls(int(value))
        return result

    if api.Std.from_str("0") is None:
        api.Std.from_str = classmethod(from_str)


def torchrun_main(argv):
    """torchrun's main on argv; returns the job's exit status (a worker's, when one failed)."""
    fix_torchrun()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    try:
        run(args)
    except ChildFailedError as e:
        codes = [f.exitcode for f in e.failures.values()]
        code = next((c for c in codes if c not in (0, None)), 1)
        return 128 - code if code < 0 else code  # a signal -> 128 + signal, as a shell reports it
    return 0


# attnscope-run's own options: (flag, ATTNSCOPE_* variable or None, help). A flag that sets a
# variable takes its help, default and allowed values from that variable's declaration
# (core/src/Config.cpp, through attnscope.options()); the text here is shown only when the attnscope
# package cannot be imported.
OWN_OPTIONS = [
    ("--run-dir", None, "directory for summaries, the Prometheus file_sd file and traces "
                        "(default /tmp/attnscope-<job or script>-<time>)"),
    ("--job", "ATTNSCOPE_JOB", "job label on every metric"),
    ("--port", "ATTNSCOPE_PORT", "metrics port of local rank 0; local rank r serves port + r"),
    ("--bind", "ATTNSCOPE_BIND", "address the metrics endpoints listen on"),
    ("--sample-every", "ATTNSCOPE_SAMPLE_EVERY", "record one step in N"),
    ("--interval", "ATTNSCOPE_INTERVAL_S", "seconds between aggregation rounds and metric updates"),
    ("--aggregation", "ATTNSCOPE_AGGREGATION", "how ranks' figures come together"),
    ("--pushgateway", "ATTNSCOPE_PUSHGATEWAY", "push metrics to this Prometheus push gateway"),
    ("--metrics-auth", "ATTNSCOPE_METRICS_AUTH", "basic auth for /metrics: user:password or @file"),
    ("--control-token", "ATTNSCOPE_CONTROL_TOKEN", "enable /control on the endpoints with this bearer token"),
    ("--metrics-layers", "ATTNSCOPE_METRICS_LAYERS", "per-layer series on every rank (1; costs series per layer)"),
    ("--trace-dir", "ATTNSCOPE_TRACE_DIR", "per-rank trace files for attnscope-analyze (default <run-dir>/traces)"),
    ("--log-level", "ATTNSCOPE_LOG_LEVEL", "stderr verbosity"),
    ("--straggler-threshold", "ATTNSCOPE_STRAGGLER_THRESHOLD", "straggler score threshold"),
]
FLAGS = {flag: var for flag, var, _ in OWN_OPTIONS}
FLAGS["--no-attach"] = None

USAGE = """usage: attnscope-run [attnscope options] [torchrun options] SCRIPT [SCRIPT ARGS]
       attnscope-run [attnscope options] [torchrun options] --no_python BINARY [ARGS]

Runs torchrun with attnscope set up on every rank: ATTNSCOPE_* variables for each worker, the
Prometheus file_sd file, the summaries, and for Python scripts zero-code attach (an unmodified
script's torch.nn.MultiheadAttention modules are observed per module name, and attnscope follows
torch.distributed.init_process_group). Returns the job's exit status.

attnscope options (any ATTNSCOPE_* variable already set is kept unless a flag overrides it):
{own}
  --no-attach             do not instrument Python scripts (they may call attnscope themselves)
  -h, --help              this text; torchrun's options: launch/torchrun --help

Example:
  launch/attnscope-run --nproc_per_node 2 examples/train_transformer.py --steps 50
  launch/attnscope-run --nproc_per_node 4 --port 9500 --no_python build/examples/train_transformer
"""


def declared_options():
    """ATTNSCOPE_* name -> declaration (attnscope.options()), or {} when the package is not found."""
    package = python_package_dir()
    if package is None:
        return {}
    sys.path.insert(0, package)
    try:
        import attnscope
        return {o["name"]: o for o in attnscope.options()}
    except ImportError:
        return {}
    finally:
        sys.path.remove(package)


def usage():
    import textwrap
    declared = declared_options()
    lines = []
    for flag, var, text in OWN_OPTIONS:
        d = declared.get(var)
        if d is not None:
            default = " (default <run-dir>/traces)" if var == "ATTNSCOPE_TRACE_DIR" else \
                f" (default {d['default'].strip('()')})"
            text = f"{d['meaning']}{default}; {var}: {d['allowed']}"
        wrapped = textwrap.wrap(text, 100 - 26) or [""]
        lines.append(f"  {flag + ' VALUE':<22}  {wrapped[0]}")
        lines += [" " * 26 + w for w in wrapped[1:]]
    if not declared:
        lines.append("  (defaults and allowed values: docs/CONFIGURATION.md; attnscope is not built here)")
    return USAGE.format(own="\n".join(lines))


def split_args(argv, torchrun_parser):
    """(own options, torchrun's argv): attnscope's flags are taken from before the script."""
    own, rest = {}, []
    takes_value = {}
    for action in torchrun_parser._actions:
        for opt in action.option_strings:
            takes_value[opt] = action.nargs != 0
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if name in FLAGS:
            if name == "--no-attach":
                own[name] = True
                i += 1
                continue
            if "=" in tok:
                own[name] = tok.split("=", 1)[1]
                i += 1
            elif i + 1 < len(argv):
                own[name] = argv[i + 1]
                i += 2
            else:
                raise SystemExit(f"attnscope-run: error: argument {name}: expected one argument")
            continue
        if not tok.startswith("-"):
            return own, rest + argv[i:]  # the script and its arguments
        rest.append(tok)
        if "=" not in tok and takes_value.get(name, False) and i + 1 < len(argv):
            rest.append(argv[i + 1])
            i += 1
        i += 1
    return own, rest


def python_package_dir():
    """Where the attnscope Python package is: ATTNSCOPE_PYTHONPATH, the build tree, a CMake install
    tree, or this Python's site-packages (pip install .)."""
    for d in (os.environ.get("ATTNSCOPE_PYTHONPATH"), os.path.join(ROOT, "build", "python"),
              os.path.join(ROOT, "lib", "attnscope", "python")):
        if d and os.path.isdir(os.path.join(d, "attnscope")):
            return d
    import importlib.util
    spec = importlib.util.find_spec("attnscope")
    if spec is not None and spec.origin:
        return os.path.dirname(os.path.dirname(spec.origin))
    return None


def bootstrap_dir(package):
    """The directory of the sitecustomize that attaches attnscope in every worker: the checkout's
    python/bootstrap, or the installed package's _bootstrap."""
    for d in (os.path.join(ROOT, "python", "bootstrap"), os.path.join(package, "attnscope", "_bootstrap")):
        if os.path.isfile(os.path.join(d, "sitecustomize.py")):
            return d
    return None


def main():
    """The attnscope-run console script."""
    sys.exit(attnscope_run(sys.argv[1:]))


def torchrun_entry():
    """The attnscope-torchrun console script: torchrun with Debian's Std.from_str fixed."""
    fix_torchrun()
    from torch.distributed.run import main as run_main
    sys.exit(run_main())


def attnscope_run(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    fix_torchrun()
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "attnscope-run"
    own, torchrun_argv = split_args(argv, parser)
    args = parser.parse_args(torchrun_argv)  # torchrun's own errors, exit 2
    script = args.training_script
    if args.no_python:
        if shutil.which(script) is None and not os.access(script, os.X_OK):
            print(f"attnscope-run: error: --no_python: {script!r} is not an executable file or command", file=sys.stderr)
            return 2
    elif not args.module and not os.path.isfile(script):
        print(f"attnscope-run: error: script {script!r} does not exist", file=sys.stderr)
        return 2

    env = os.environ
    # Without --job the ranks label their series <script>-<MASTER_ADDR>-<MASTER_PORT> (or torchrun's
    # --rdzv_id): the same on every rank, and not torchrun's "none".
    job = own.get("--job") or env.get("ATTNSCOPE_JOB")
    program = script if args.module else os.path.splitext(os.path.basename(script))[0]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = os.path.abspath(own.get("--run-dir") or f"/tmp/attnscope-{job or program}-{stamp}")
    os.makedirs(run_dir, exist_ok=True)
    env.setdefault("ATTNSCOPE_SUMMARY_JSON", os.path.join(run_dir, "summary-{rank}.json"))
    env.setdefault("ATTNSCOPE_FILE_SD", os.path.join(run_dir, "targets.json"))
    for flag, value in own.items():
        if FLAGS.get(flag):
            env[FLAGS[flag]] = str(value)
    package = python_package_dir()
    if package is None:
        print("attnscope-run: error: the attnscope Python package was not found (build it: cmake --build build, "
              "or set ATTNSCOPE_PYTHONPATH)", file=sys.stderr)
        return 2
    sys.path.insert(0, package)
    import attnscope  # noqa: E402

    known = {o["name"] for o in attnscope.options()}
    if "ATTNSCOPE_TRACE_DIR" in known:
        env.setdefault("ATTNSCOPE_TRACE_DIR", os.path.join(run_dir, "traces"))
        os.makedirs(env["ATTNSCOPE_TRACE_DIR"], exist_ok=True)
    elif "--trace-dir" in own:
        print("attnscope-run: error: --trace-dir: this build has no trace store", file=sys.stderr)
        return 2
    try:  # bad configuration fails here, before any worker starts
        settings = attnscope.check_config({k: v for k, v in env.items() if k.startswith("ATTNSCOPE_")})
    except ValueError as e:
        print(f"attnscope-run: error: {e}", file=sys.stderr)
        return 2
    if not args.no_python and "--no-attach" not in own:
        paths = [bootstrap_dir(package), package]
        env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])

    nproc = args.nproc_per_node
    port, host = settings["port"], settings["bind"]
    host = socket.gethostname() if host == "0.0.0.0" else host
    ports = f"{port}" if str(nproc) == "1" else f"{port}..{port + int(nproc) - 1}" if str(nproc).isdigit() else f"{port}+"
    label = repr(job) if job else f"label {program}-<rendezvous address>-<port> (--job names it)"
    print(f"attnscope-run: job {label}, {nproc} rank(s) per node, run directory {run_dir}", file=sys.stderr)
    if port:
        print(f"attnscope-run: metrics   http://{host}:{ports}/metrics (rank 0 adds the job summary)", file=sys.stderr)
    print(f"attnscope-run: targets   {env['ATTNSCOPE_FILE_SD']} (Prometheus file_sd, written by rank 0)", file=sys.stderr)
    print(f"attnscope-run: summaries {env['ATTNSCOPE_SUMMARY_JSON']}", file=sys.stderr)
    if "ATTNSCOPE_TRACE_DIR" in env:
        print(f"attnscope-run: traces    {env['ATTNSCOPE_TRACE_DIR']} (attnscope-analyze)", file=sys.stderr)
    code = torchrun_main(torchrun_argv)
    print(f"attnscope-run: job exited with status {code}; outputs in {run_dir}", file=sys.stderr)
    return code
