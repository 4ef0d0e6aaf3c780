#!/usr/bin/env python3
"""Aggregation round latency and bytes per rank for 2, 4 and 8 ranks on this machine, for the two
ways ranks aggregate on a pip-installed torch:

- gloo:  the unmodified Python example (examples/train_transformer.py, DDP over Gloo) under the
         zero-code attach, which forms attnscope's Gloo side group after init_process_group;
- store: the C++ example (gradients through its store), attnscope aggregating through the store.

Each run has N ranks on loopback; rank 0's summary gives the mean and largest wall time of a
round's collectives (all-gather of the per-rank scalars + all-reduce of the window's statistics)
and the bytes each rank contributes per round.

    .venv/bin/python bench/aggregation_bench.py build/examples/train_transformer [--layers 4]
"""
import json
import os
import socket
import subprocess
import sys
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(example, world, layers, mode):
    tmp = tempfile.mkdtemp(prefix=f"attnscope-aggbench-{mode}-{world}-")
    port = free_port()
    procs = []
    build = os.path.dirname(os.path.dirname(os.path.abspath(example)))
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ATTNSCOPE_INTERVAL_S="0.5", ATTNSCOPE_LOG_LEVEL="warn",
                   ATTNSCOPE_SUMMARY_JSON=os.path.join(tmp, "s-{rank}.json"),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        model = ["--layers", str(layers), "--d-model", "32", "--heads", "4", "--seq", "16", "--batch", "4",
                 "--threads", "1", "--steps", "100000", "--duration-s", "8"]
        if mode == "gloo":
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python", "bootstrap"),
                                                 os.path.join(build, "python")])
            cmd = [sys.executable, os.path.join(ROOT, "examples", "train_transformer.py")] + model
        else:
            cmd = [example] + model + ["--quiet"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL))
    codes = [p.wait(timeout=300) for p in procs]
    if codes != [0] * world:
        raise SystemExit(f"{world} ranks: exit codes {codes}")
    with open(os.path.join(tmp, "s-0.json")) as f:
        return json.load(f)["cluster"]


def main():
    example = sys.argv[1]
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 4
    print(f"attnscope aggregation round on loopback, {layers} layers, 0.5 s interval, "
          f"{os.cpu_count()} cores")
    print(f"{'backend':>8} {'ranks':>5} {'rounds':>7} {'mean round':>11} {'max round':>10} {'bytes/rank/round':>17}")
    for world in (2, 4, 8):
        for mode in ("gloo", "store"):
            c = run(example, world, layers, mode)
            if c["aggregation"] != mode:
                raise SystemExit(f"{mode}, {world} ranks: aggregated over {c['aggregation']}: {c['last_error']}")
            r = c["round_seconds"]
            print(f"{mode:>8} {world:>5} {r['rounds']:>7} {r['mean'] * 1e3:>9.2f}ms {r['max'] * 1e3:>8.2f}ms "
                  f"{c['round_bytes_per_rank']:>17}", flush=True)


if __name__ == "__main__":
    main()
