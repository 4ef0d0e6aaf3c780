#!/usr/bin/env python3
"""Multi-process tests of cross-rank aggregation with real processes, real torchrun and real mpirun
(the real Gloo side group of Python jobs: launch_test.py). Run by ctest:
pytest distributed_test.py::test_<case> --example EXAMPLE_BINARY --source-dir SOURCE_DIR

Cases:
  store2_sums         2 ranks aggregating through the job's store (a C++ program on the pip wheel
                      hands in no group): the cluster statistics on rank 0 equal the sum of every
                      rank's own (not whether anyone is a straggler: see the case)
  store4_no_straggler 4 ranks, no injection, many windows: nobody is reported
  torchrun4_straggler 4 ranks under torchrun (launch/torchrun), rank 2 slowed in layer 1
  mpirun4_straggler   the same under mpirun with ATTNSCOPE_AGGREGATION=mpi
  kill4               SIGKILL rank 3 of 4 mid-run: the others report it missing within 3
                      intervals and finish cleanly; nothing hangs
  kill_store_host4    SIGKILL rank 0, which serves the store: the others finish cleanly
  hang3               rank 1 stops stepping for 8 s: reported hung, then no longer
  ceilings_cache4     4 ranks start together on a machine with no ceilings cache: exactly one
                      measures the roofline's ceilings, the others read its cache file; a second
                      job only reads; all say when and where from; a foreign entry is not used
"""
import json
import os
import signal
import subprocess
import time

from ranks import TINY, ExampleRanks, free_ports
import ranks


def load(run_dir, rank):
    with open(os.path.join(run_dir, f"s-{rank}.json")) as f:
        return json.load(f)


def cells(layer):
    for phase, ph in layer["phases"].items():
        yield (phase, "call"), ph["call"]
        for kind, c in ph["op_kinds"].items():
            yield (phase, kind), c


def assert_sums(run_dir, world):
    summaries = [load(run_dir, r) for r in range(world)]
    cluster = summaries[0]["cluster"]
    assert cluster["round_errors"] == 0, f"round errors: {cluster['last_error']}"
    names = [l["name"] for l in cluster["layers"]]
    assert names == [l["name"] for l in summaries[0]["layers"]], f"cluster layers {names}"
    compared = 0
    for i, layer in enumerate(cluster["layers"]):
        own = [dict(cells(s["layers"][i])) for s in summaries]
        for key, c in cells(layer):
            for field in ("count", "ops", "bytes_allocated"):
                total = sum(o[key][field] for o in own if key in o)
                assert c[field] == total, f"{layer['name']} {key} {field}: cluster {c[field]} != sum {total}"
            total = sum(o[key]["total_seconds"] for o in own if key in o)
            assert abs(c["total_seconds"] - total) <= 1e-6 * max(1.0, total), (
                   f"{layer['name']} {key} seconds: cluster {c['total_seconds']} != sum {total}")
            compared += 1
    assert compared > 20, f"only {compared} cells compared"
    return summaries


def assert_straggler(run_dir, world, slow_rank, slow_layer, stderr_text):
    s0 = load(run_dir, 0)
    cluster = s0["cluster"]
    assert cluster["expected_ranks"] == world and cluster["present_ranks"] == world, (
           f"ranks present: {cluster['present_ranks']} of {cluster['expected_ranks']}")
    assert len(cluster["ranks"]) == world, "not every rank in the cluster section"
    flagged = sorted({f["rank"] for f in cluster["stragglers"]})
    assert flagged == [slow_rank], f"stragglers {flagged}, expected [{slow_rank}]: {cluster['stragglers']}"
    finding = cluster["stragglers"][0]
    assert finding["layer"] == f"layers.{slow_layer}.attn", (
           f"attributed to {finding['layer']}, expected layers.{slow_layer}.attn")
    assert f"rank {slow_rank}: " in stderr_text and "median attention time" in stderr_text, (
           "no straggler line in rank 0's log")
    print("straggler:", finding["description"])


def ceilings_lines(run_dir, world):
    """Each rank's roofline-ceilings log line."""
    lines = []
    for r in range(world):
        with open(os.path.join(run_dir, f"err-{r}.log")) as f:
            found = [l for l in f if "roofline ceilings (calibration)" in l]
        assert len(found) == 1, f"rank {r}: {len(found)} ceilings lines"
        lines.append(found[0].strip())
    return lines


def test_ceilings_cache4(run_dir, example_ranks):
    # A machine's first job: its 4 local ranks start together; one measures the ceilings while the
    # others wait for its lock and read what it wrote. The next job only reads.
    cache = os.path.join(run_dir, "cache")
    env = dict(example_ranks.env(1.0), XDG_CACHE_HOME=cache)
    for run in ("first", "second"):
        procs = example_ranks.spawn(4, env, TINY + ["--steps", "10"])
        assert example_ranks.wait(procs) == [0] * 4, f"{run} run: ranks failed"
        lines = ceilings_lines(run_dir, 4)
        for line in lines:
            print(f"{run}: {line}")
        measured = [l for l in lines if "(this process)" in l]
        cached = [l for l in lines if "(cache " in l]
        assert len(measured) == (1 if run == "first" else 0) and len(measured) + len(cached) == 4, (
               f"{run} run: {len(measured)} ranks measured, {len(cached)} read the cache")
        summaries = [load(run_dir, r)["roofline"]["ceilings"] for r in range(4)]
        assert len({(s["peak_flops_per_second"], s["peak_bytes_per_second"]) for s in summaries}) == 1, (
               f"{run} run: the ranks' ceilings differ: {summaries}")
        assert all(s["source"] == "calibration" and " measured 20" in s["detail"] for s in summaries), (
               f"{run} run: the summary does not say when they were measured: {summaries[0]}")
    files = [n for n in os.listdir(os.path.join(cache, "attnscope")) if n.startswith("ceilings-")
             and not n.endswith(".lock")]
    assert len(files) == 1, f"cache files {files}"
    # A cache file from another machine or torch (its key differs) is measured over, not used.
    path = os.path.join(cache, "attnscope", files[0])
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text.replace("key cpu=", "key cpu=another "))
    procs = example_ranks.spawn(1, env, TINY + ["--steps", "3"])
    assert example_ranks.wait(procs) == [0], "ranks failed"
    assert "(this process)" in ceilings_lines(run_dir, 1)[0], "a foreign cache entry was used"


def test_store2_sums(run_dir, example_ranks):
    procs = example_ranks.spawn(2, example_ranks.env(0.3), TINY + ["--steps", "400"])
    codes = example_ranks.wait(procs)
    assert codes == [0, 0], f"exit codes {codes}"
    summaries = assert_sums(run_dir, 2)
    assert summaries[0]["cluster"]["aggregation"] == "store", f"aggregation {summaries[0]['cluster']['aggregation']}"
    assert summaries[0]["cluster"]["rounds"] >= 3, "fewer than 3 rounds"
    # No straggler assertion here: 0.3 s windows give this case many rounds to sum, and at that
    # length a scheduler preemption on a shared 2-core host makes one rank truly 1.4x slower for 3
    # windows (seen in CI). Whether a healthy job stays unflagged is store4_no_straggler's question,
    # asked with the 1 s windows it needs, and bench/detection_quality.py's over seeded trials.
    # The job's own gradient all-reduce was observed on every rank.
    waits = [r["collective_wait_seconds_per_step"] for r in summaries[0]["cluster"]["ranks"]]
    assert all(w > 0 for w in waits), f"collective wait not observed: {waits}"
    print("cluster statistics equal the sum of 2 ranks' over", summaries[0]["cluster"]["rounds"], "rounds")


def test_store4_no_straggler(run_dir, example_ranks):
    # 1 s windows (the default is 10 s): 4 ranks share 2 cores here, and shorter windows are
    # dominated by which process the scheduler preempted.
    env = example_ranks.env(1.0)
    procs = example_ranks.spawn(4, env, TINY + ["--steps", "100000000", "--duration-s", "32"])
    codes = example_ranks.wait(procs)
    assert codes == [0] * 4, f"exit codes {codes}"
    summaries = assert_sums(run_dir, 4)
    cluster = summaries[0]["cluster"]
    assert cluster["rounds"] >= 25, f"only {cluster['rounds']} windows"
    assert cluster["stragglers"] == [], f"false straggler: {cluster['stragglers']}"
    assert cluster["hangs"] == [], f"false hang/missing: {cluster['hangs']}"
    print("no straggler over", cluster["rounds"], "windows of 4 ranks")


def test_torchrun4_straggler(run_dir, example_ranks, source_dir, example):
    env = example_ranks.env(0.5)
    port = free_ports(2)
    cmd = [os.path.join(source_dir, "launch", "torchrun"), "--nproc_per_node", "4",
           "--master_port", str(port), "--no_python", example] + TINY + [
           "--steps", "500", "--slow-rank", "2", "--slow-factor", "4", "--slow-layer", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=ExampleRanks.DEADLINE_S)
    assert p.returncode == 0, f"torchrun exit {p.returncode}: {p.stderr[-2000:]}"
    assert_straggler(run_dir, 4, 2, 1, p.stderr)


def test_mpirun4_straggler(run_dir, example_ranks, example):
    env = example_ranks.env(0.5)
    port = free_ports(2)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]
    for name in ("ATTNSCOPE_INTERVAL_S", "ATTNSCOPE_SUMMARY_JSON", "ATTNSCOPE_LOG_LEVEL",
                 "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        cmd += ["-x", name]
    cmd += ["-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}", "-x", "ATTNSCOPE_AGGREGATION=mpi",
            example] + TINY + ["--steps", "500", "--slow-rank", "2", "--slow-factor", "4", "--slow-layer", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=ExampleRanks.DEADLINE_S)
    assert p.returncode == 0, f"mpirun exit {p.returncode}: {p.stderr[-2000:]}"
    assert load(run_dir, 0)["cluster"]["aggregation"] == "mpi", "not aggregated over mpi"
    assert_straggler(run_dir, 4, 2, 1, p.stderr)


def start_and_kill(example_ranks, interval, duration, victim):
    """4 ranks that train on their own (no gradient all-reduce, so the survivors can go on after
    a death) for `duration` seconds; SIGKILL `victim` once rank 0's trace holds 2 rounds that all
    four answered (the group formed: a kill before would test start-up, not a death). Deadline:
    half the run, so at least half of it is left after the kill."""
    env = example_ranks.env(interval)
    env["ATTNSCOPE_ROUND_TIMEOUT_S"] = "2"
    env["ATTNSCOPE_TRACE_DIR"] = os.path.join(example_ranks.dir, "trace")
    procs = example_ranks.spawn(4, env, TINY + ["--steps", "100000000", "--duration-s", str(duration),
                                        "--grad-sync", "none"])
    took = ranks.wait_for_full_rounds(env["ATTNSCOPE_TRACE_DIR"], 4, 2, duration / 2)
    print(f"2 full rounds {took:.1f} s after the start; killing rank {victim}")
    assert all(p.poll() is None for p in procs), "a rank ended before the kill"
    procs[victim].send_signal(signal.SIGKILL)
    return procs, time.time()


def test_kill4(run_dir, example_ranks):
    interval = 1.0
    procs, killed_at = start_and_kill(example_ranks, interval, duration=16, victim=3)
    # Watch rank 0's log for the missing report.
    log0 = os.path.join(run_dir, "err-0.log")
    reported_after = None
    while time.time() - killed_at < 20:
        with open(log0) as f:
            if "rank 3: missing since round" in f.read():
                reported_after = time.time() - killed_at
                break
        time.sleep(0.05)
    assert reported_after is not None, "rank 3 never reported missing: " + open(log0).read()[-2000:]
    for p in procs[:3]:
        assert p.poll() is None, "a survivor died after the kill"
    # The bound: the next round starts within one interval of the kill, its wait for the dead rank
    # ends after the round timeout (2 s; on Gloo the closed connection fails it sooner), and that
    # round reports the rank missing. Margin: one more interval for the round's own store reads and
    # the log on a loaded 2-core machine, and this loop's 50 ms poll (seen: 3.05 s, store path).
    bound = interval + 2.0 + interval
    print(f"rank 3 reported missing {reported_after:.2f}s after SIGKILL (bound: interval + round "
          f"timeout + one interval of margin = {bound:.1f}s)")
    assert reported_after <= bound, f"reported after {reported_after:.2f}s, more than {bound:.1f}s"
    # The survivors train on to the end of --duration-s and stop cleanly; nothing hangs.
    codes = example_ranks.wait(procs[:3], deadline=60)
    assert codes == [0, 0, 0], f"survivors exited with {codes}"
    cluster = load(run_dir, 0)["cluster"]
    assert cluster["degraded"], "rank 0 did not record the degraded state"
    missing = [h for h in cluster["hangs"] if h["rank"] == 3]
    assert missing and "missing" in missing[0]["description"], f"rank 3 not missing in the summary: {cluster['hangs']}"
    assert [r["rank"] for r in cluster["ranks"] if r["present"]] == [0, 1, 2], (
           f"present at the end: {[r['rank'] for r in cluster['ranks'] if r['present']]}")
    for r in range(3):
        assert load(run_dir, r)["run"]["steps_seen"] > 0, f"rank {r} wrote no per-rank summary"
    print("survivors exited with", codes, "; rank 0's summary lists rank 3 missing")


def test_kill_store_host4(run_dir, example_ranks):
    """SIGKILL rank 0, which serves attnscope's store: the others lose the store and the
    collectives, keep their per-rank output, and still stop within a bounded time."""
    procs, killed_at = start_and_kill(example_ranks, 0.5, duration=10, victim=0)
    # Each survivor trains to 10 s (at most 10 s after the kill), then stop() is bounded by
    # 2 x round timeout + 5 s; 20 s of margin for a loaded machine.
    codes = example_ranks.wait(procs[1:], deadline=10 + 2 * 2 + 5 + 20)
    print(f"survivors exited with {codes} {time.time() - killed_at:.1f}s after the kill")
    assert codes == [0, 0, 0], f"survivors exited with {codes}"
    for r in (1, 2, 3):
        assert load(run_dir, r)["run"]["steps_seen"] > 0, f"rank {r} wrote no per-rank summary"
        log = open(os.path.join(run_dir, f"err-{r}.log")).read()
        assert "aggregation failed" in log or "store unreachable" in log or "heartbeat" in log, (
               f"rank {r} logged nothing about the lost store: {log[-800:]}")


def test_hang3(run_dir, example_ranks):
    """Rank 1 stops stepping for 8 s while ranks 0 and 2 go on: reported hung after
    ATTNSCOPE_HANG_S, and no longer once it moves again."""
    env = example_ranks.env(0.5)
    env["ATTNSCOPE_HANG_S"] = "2"
    procs = example_ranks.spawn(3, env, TINY + ["--steps", "100000000", "--duration-s", "16",
                                        "--grad-sync", "none", "--stall-rank", "1",
                                        "--stall-after-s", "3", "--stall-for-s", "8"])
    codes = example_ranks.wait(procs, deadline=90)
    assert codes == [0, 0, 0], f"exit codes {codes}"
    log0 = open(os.path.join(run_dir, "err-0.log")).read()
    assert "rank 1: step counter stalled at" in log0, "no hang line in rank 0's log: " + log0[-1500:]
    cluster = load(run_dir, 0)["cluster"]
    hangs = [h for h in cluster["hangs"] if h["rank"] == 1]
    assert len(hangs) == 1 and "stalled" in hangs[0]["description"], f"hang episodes: {cluster['hangs']}"
    assert [h for h in cluster["hangs"] if h["rank"] != 1] == [], f"other ranks hung: {cluster['hangs']}"
    # Stalled 8 s with a 2 s threshold at 0.5 s rounds: the episode spans about 12 rounds.
    span = hangs[0]["last_round"] - hangs[0]["first_round"] + 1
    assert 8 <= span <= 16, f"hang episode of {span} rounds"
    assert not cluster["ranks"][1]["hung"], "rank 1 still hung after it moved again"
    print("rank 1 hung for", span, "rounds:", hangs[0]["description"])
