#!/usr/bin/env python3
"""A real Prometheus scraping a simulated many-rank job: how many series it holds.

build/bench/scrape_bench --dump writes what one rank and rank 0 serve for a job of N ranks and L
layers (the default shape); this script serves rank 0's exposition and, under each rank's labels,
the rank's, on N loopback ports from one process, lists them in a file_sd file as rank 0 would, lets
a real Prometheus (`prometheus` on PATH, Debian's) scrape them every 5 s, and reads its own
`prometheus_tsdb_head_series` once every target has been scraped twice. The formula's total
(scrape_bench's "job" column) and Prometheus' count are printed side by side.

    bench/prometheus_scale.py build/bench/scrape_bench [--ranks 1024] [--layers 80] [--gpu]

Not a test (about a minute at 1,024 ranks here); docs/METRICS.md ("Series budget") has its figures.
"""
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from prometheus_server import Prometheus, http_get, wait_for  # noqa: E402
from ranks import free_ports  # noqa: E402


def serve(bodies, ports, ready):
    """Serves bodies[i] at http://127.0.0.1:ports[i]/metrics (HTTP/1.1, keep-alive) until the process ends."""
    async def handler(reader, writer, body):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        for body, port in zip(bodies, ports):
            await asyncio.start_server(lambda r, w, b=body: handler(r, w, b), "127.0.0.1", port)
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scrape_bench")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--gpu", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="attnscope-scale-")
    extra = ["--gpu"] if args.gpu else []
    subprocess.run([args.scrape_bench, "--dump", tmp, "--ranks", str(args.ranks), "--layers", str(args.layers)]
                   + extra, check=True)
    table = subprocess.run([args.scrape_bench, "--ranks", str(args.ranks), "--layers", str(args.layers)] + extra,
                           capture_output=True, text=True, check=True).stdout
    formula = float(re.search(r"default .*\| job +(\d+) series", table).group(1))
    rank = open(os.path.join(tmp, "rank.txt")).read()
    zero = open(os.path.join(tmp, "rank0.txt")).read().encode()
    # Rank r's exposition: rank 1's with its rank labels (rank, local_rank) set to r's.
    bodies = [zero] + [rank.replace('rank="1",local_rank="1"', f'rank="{r}",local_rank="{r % 8}"').encode()
                       for r in range(1, args.ranks)]
    base = free_ports(args.ranks)
    ports = list(range(base, base + args.ranks))
    ready = threading.Event()
    threading.Thread(target=serve, args=(bodies, ports, ready), daemon=True).start()
    ready.wait(60)
    targets = os.path.join(tmp, "targets.json")
    with open(targets, "w") as f:
        json.dump([{"targets": [f"127.0.0.1:{p}"], "labels": {"job": "scale", "rank": str(r)}}
                   for r, p in enumerate(ports)], f)
    started = time.time()
    prom = Prometheus(tmp, targets, interval="5s")
    try:
        def scraped_twice():
            up = prom.query('count(count_over_time(up{job="scale"}[1m]) >= 2)')
            return up and int(float(up[0]["value"][1])) == args.ranks
        wait_for(f"every one of {args.ranks} targets scraped twice", scraped_twice, 300)
        # Prometheus' own gauge, from its own /metrics (it does not scrape itself here).
        status, own_metrics = http_get(f"http://127.0.0.1:{prom.port}/metrics")
        head = float(re.search(r"^prometheus_tsdb_head_series (\S+)$", own_metrics, re.M).group(1))
        ours = float(prom.query('count({__name__=~"attnscope_.*"})')[0]["value"][1])
        # Prometheus adds up, scrape_duration_seconds, scrape_samples_scraped,
        # scrape_samples_post_metric_relabeling and scrape_series_added per target.
        synthetic = 5 * args.ranks
        print(f"{args.ranks} ranks, {args.layers} layers{' (GPU)' if args.gpu else ''}: Prometheus holds "
              f"{ours:.0f} attnscope series (formula: {formula:.0f}), and {head:.0f} in all "
              f"(prometheus_tsdb_head_series: with the {synthetic} per-target series of its own); "
              f"{time.time() - started:.0f} s")
    finally:
        prom.stop()


if __name__ == "__main__":
    main()
