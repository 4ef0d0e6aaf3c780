#!/usr/bin/python3
"""Aggregation round latency and bytes per rank for 2, 4 and 8 ranks on this machine.

Runs the example (gradient all-reduce over Gloo, attnscope aggregating over its own Gloo group)
with N ranks on loopback and reads rank 0's summary: the mean and largest wall time of a round's
collectives (all-gather of the per-rank scalars + all-reduce of the window's statistics) and the
bytes each rank contributes per round.

    /usr/bin/python3 bench/aggregation_bench.py build/examples/train_transformer [--layers 4]
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


def run(example, world, layers):
    tmp = tempfile.mkdtemp(prefix=f"attnscope-aggbench-{world}-")
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ATTNSCOPE_INTERVAL_S="0.5", ATTNSCOPE_LOG_LEVEL="warn",
                   ATTNSCOPE_SUMMARY_JSON=os.path.join(tmp, "s-{rank}.json"),
                   OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [example, "--layers", str(layers), "--d-model", "32", "--heads", "4", "--seq", "16",
             "--batch", "4", "--threads", "1", "--steps", "100000", "--duration-s", "8", "--quiet"],
            env=env, stdout=subprocess.DEVNULL))
    codes = [p.wait(timeout=300) for p in procs]
    if codes != [0] * world:
        raise SystemExit(f"{world} ranks: exit codes {codes}")
    with open(os.path.join(tmp, "s-0.json")) as f:
        return json.load(f)["cluster"]


def main():
    example = sys.argv[1]
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 4
    print(f"attnscope aggregation round, gloo on loopback, {layers} layers, 0.5 s interval, "
          f"{os.cpu_count()} cores")
    print(f"{'ranks':>5} {'rounds':>7} {'mean round':>11} {'max round':>10} {'bytes/rank/round':>17}")
    for world in (2, 4, 8):
        c = run(example, world, layers)
        r = c["round_seconds"]
        print(f"{world:>5} {r['rounds']:>7} {r['mean'] * 1e3:>9.2f}ms {r['max'] * 1e3:>8.2f}ms "
              f"{c['round_bytes_per_rank']:>17}")


if __name__ == "__main__":
    main()
