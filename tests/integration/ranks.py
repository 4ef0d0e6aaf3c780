"""What the multi-process tests share: checks, free loopback ports, the ranks' environment, and
starting and waiting for real rank processes, decoding the PNGs Chromium writes."""
import json
import os
import socket
import subprocess
import time
import struct
import zlib

# The example's smallest model: quick steps, every attention op kind still there.
TINY = ["--layers", "4", "--d-model", "32", "--heads", "4", "--seq", "16", "--batch", "4",
        "--threads", "1", "--quiet"]


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def free_ports(n=2):
    """The first of n consecutive free loopback ports (2: the job's store and attnscope's own,
    MASTER_PORT + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        held = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()


def rank_env(tmp, interval, log_level="info", **extra):
    """The environment of a test's ranks: attnscope's interval, summaries in tmp, one thread."""
    env = dict(os.environ)
    env.update({
        "ATTNSCOPE_INTERVAL_S": str(interval),
        "ATTNSCOPE_SUMMARY_JSON": os.path.join(tmp, "s-{rank}.json"),
        "ATTNSCOPE_LOG_LEVEL": log_level,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    })
    env.update(extra)
    return env


def run_env(build, **variables):
    """The environment of a job under launch/attnscope-run: none of this process' ATTNSCOPE_ or rank
    variables, one thread, the attnscope module of `build`, endpoints on loopback; `variables` added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSCOPE_") and k not in ("RANK", "WORLD_SIZE")}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", ATTNSCOPE_PYTHONPATH=os.path.join(build, "python"),
               ATTNSCOPE_BIND="127.0.0.1")
    env.update(variables)
    return env


# What a job of transformers models adds: nothing downloaded.
OFFLINE = {"TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def spawn_ranks(binary, world, env, args, tmp, **kw):
    """`world` ranks of `binary` with torchrun's variables set by hand; stderr to tmp/err-<rank>.log."""
    port = free_ports(2)
    procs = []
    for rank in range(world):
        e = dict(env, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                 LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        err = open(os.path.join(tmp, f"err-{rank}.log"), "w")
        procs.append(subprocess.Popen([binary] + args, env=e, stdout=subprocess.DEVNULL, stderr=err, **kw))
    return procs


def wait_all(procs, deadline):
    """Exit codes of all; kills every one and fails when any still runs after `deadline` s."""
    end = time.time() + deadline
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, end - time.time())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"ranks still running after {deadline}s: a hang")
    return codes


class ExampleRanks:
    """Rank processes of one program (the example) whose summaries and logs go to one directory,
    the test's run directory; waited for DEADLINE_S unless a test says otherwise."""

    DEADLINE_S = 240

    def __init__(self, binary, directory):
        self.binary = binary
        self.dir = directory

    def env(self, interval, log_level="info", **extra):
        return rank_env(self.dir, interval, log_level, **extra)

    def spawn(self, world, env, args, **kw):
        return spawn_ranks(self.binary, world, env, args, self.dir, **kw)

    def wait(self, procs, deadline=DEADLINE_S):
        return wait_all(procs, deadline)


def wait_for_full_rounds(trace_dir, world, rounds, deadline):
    """Waits until rank 0's trace (rank-0.sqlite in trace_dir) holds `rounds` aggregation rounds
    that every one of `world` ranks answered: the group formed and collectives run. Fails after
    `deadline` seconds. Returns the seconds it took."""
    import sqlite3
    began = time.time()
    path = os.path.join(trace_dir, "rank-0.sqlite")
    seen = 0
    while time.time() - began < deadline:
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                seen = db.execute("SELECT count(*) FROM (SELECT round FROM rounds WHERE present = 1 "
                                  "GROUP BY round HAVING count(*) = ?)", (world,)).fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error:
            pass  # not created yet, or no rounds table yet
        if seen >= rounds:
            return time.time() - began
        time.sleep(0.2)
    raise AssertionError(f"rank 0's trace has {seen} rounds answered by all {world} ranks after "
                         f"{deadline} s, not {rounds}: the group did not form")


def png_pixels(path):
    """RGB(A) rows of an 8-bit PNG (what Chromium writes), decoded with zlib only."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            check(depth == 8 and color in (2, 6), f"PNG depth {depth} color {color}")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p_ = a + b - c
                pa, pb, pc = abs(p_ - a), abs(p_ - b), abs(p_ - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return rows
