#!/usr/bin/env python3
"""A user's own C++ LibTorch program (integration/mpi_gpt.cpp) under real mpirun, attnscope
aggregating over MPI, and attnscope-analyze on its traces.
Run by ctest: pytest user_program_test.py::test_<case> --program MPI_GPT_BINARY --analyze ANALYZE_BINARY

Cases:
  mpirun4_slow_cell  4 ranks on this machine's cores (oversubscribed), 150 steps, rank 1 runs
                     blk2.self_attention's softmax 5 times. The program times its own ops; from
                     those times, the injected cell's real factor (rank 1's median time per step
                     over the median of the other ranks'). Asserted:
                     - the report's cell outliers are exactly the injected (rank, layer, phase, op
                       kind), its factor within FACTOR_TOLERANCE of the real one;
                     - live, rank 0's findings (trace `findings`, summary `cluster.cell_outliers`)
                       name the same cell and no other, its largest factor within 15% of the report's max_factor;
                     - no straggler episode, live or post-run, for a healthy rank.
Every check is evaluated and every failure listed; one line `RESULT {...}` gives the figures.
Deadlines: the program ends itself (--deadline-s), mpirun ends the job (--timeout), and this
test ends mpirun (SIGTERM, then SIGKILL) a little later; attnscope-analyze gets 30 s.
"""
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import time

WORLD = 4
STEPS = 150
SLOW = {"rank": 1, "block": 2, "op": "softmax", "times": 5}
LAYER = f"blk{SLOW['block']}.self_attention"
INJECTED = (SLOW["rank"], LAYER, "forward", SLOW["op"])
# The report's factor against the program's own (3 runs on a quiet host: 2.10-2.12x against
# 2.02-2.06x; the means of the same calls spread 1.7-3.0x): the typical time, not the mean.
FACTOR_TOLERANCE = 0.25
LIVE_TOLERANCE = 0.15
PROGRAM_DEADLINE_S = 45  # each rank ends itself then
MPIRUN_TIMEOUT_S = 50    # mpirun ends the job then
KILL_AFTER_S = 55        # this script ends mpirun then


STRAGGLER_THRESHOLD = "1.5"  # run_job says why


def run_job(tmp, program):
    env = dict(os.environ)
    settings = {
        "ATTNSCOPE_AGGREGATION": "mpi",
        "ATTNSCOPE_INTERVAL_S": "0.5",
        "ATTNSCOPE_TRACE_DIR": os.path.join(tmp, "trace"),
        "ATTNSCOPE_SUMMARY_JSON": os.path.join(tmp, "s-{rank}.json"),
        "ATTNSCOPE_LOG_LEVEL": "info",
        "ATTNSCOPE_PORT": "0",  # no metrics endpoint: nothing to collide with other tests' ports
        "ATTNSCOPE_ROUND_TIMEOUT_S": "10",
        # Four ranks share 2 cores in 0.5 s windows: a healthy rank can really run 1.37x the
        # others' attention time for 3 windows (rank 0, in one fresh-clone run), which the default
        # 1.2 rightly names. The checks below are about the injected cell, and that it does not
        # make any rank a straggler: 1.5 keeps contention out of them.
        "ATTNSCOPE_STRAGGLER_THRESHOLD": STRAGGLER_THRESHOLD,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    env.update(settings)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(WORLD),
           "--timeout", str(MPIRUN_TIMEOUT_S)]
    for name in settings:
        cmd += ["-x", name]
    inject = f"{SLOW['rank']}:{SLOW['block']}:{SLOW['op']}:{SLOW['times']}"
    cmd += [program, "--steps", str(STEPS), "--blocks", "4", "--inject", inject,
            "--timings", os.path.join(tmp, "t-{rank}.json"), "--deadline-s", str(PROGRAM_DEADLINE_S)]
    began = time.time()
    with open(os.path.join(tmp, "mpirun.log"), "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = p.wait(timeout=KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)  # mpirun passes it on to the ranks
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            raise AssertionError(f"mpirun still running after {KILL_AFTER_S} s: ended it")
    return code, time.time() - began


def analyze(tmp, analyze_bin):
    out = os.path.join(tmp, "report.json")
    # No flags: the report replays the detector at the run's own options (STRAGGLER_THRESHOLD).
    p = subprocess.run([analyze_bin, os.path.join(tmp, "trace"), "--json", out],
                       capture_output=True, text=True, timeout=30)
    report = json.load(open(out)) if os.path.exists(out) else None
    return p, report


def real_factor(tmp):
    """The injected cell's factor from the program's own clock: the slow rank's median seconds
    per step over the median of the other ranks' medians (how the report compares), and the same
    with means."""
    cell = {}
    for r in range(WORLD):
        with open(os.path.join(tmp, f"t-{r}.json")) as f:
            cell[r] = json.load(f)["forward"][LAYER][SLOW["op"]]
    others = [r for r in range(WORLD) if r != SLOW["rank"]]
    by_median = cell[SLOW["rank"]]["median_s"] / statistics.median(cell[r]["median_s"] for r in others)
    by_mean = cell[SLOW["rank"]]["mean_s"] / statistics.median(cell[r]["mean_s"] for r in others)
    return by_median, by_mean, {r: cell[r]["median_s"] for r in range(WORLD)}


def live_findings(tmp):
    db = sqlite3.connect(f"file:{os.path.join(tmp, 'trace', 'rank-0.sqlite')}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT kind, rank, first_round, last_round, max_score, layer, phase, "
                          "op_kind, description FROM findings").fetchall()
    finally:
        db.close()
    keys = ("kind", "rank", "first_round", "last_round", "max_score", "layer", "phase", "op_kind",
            "description")
    return [dict(zip(keys, row)) for row in rows]


def cell_of(c):
    return (c["rank"], c["layer"], c["phase"], c["op_kind"])


def test_mpirun4_slow_cell(run_dir, program, analyze_bin):
    failures = []

    def expect(cond, message):
        if not cond:
            failures.append(message)

    code, wall = run_job(run_dir, program)
    assert code == 0, f"mpirun exit {code}"
    p, report = analyze(run_dir, analyze_bin)
    assert p.returncode == 0 and report is not None, f"attnscope-analyze exit {p.returncode}: {p.stderr[-1500:]}"
    real, real_mean, medians = real_factor(run_dir)
    result = {"wall_s": round(wall, 1), "real_factor": round(real, 2),
              "real_factor_means": round(real_mean, 2)}

    # Post-run: exactly the injected cell, with the real factor.
    cells = report["cell_outliers"]
    result["report_cells"] = [[*cell_of(c), round(c["factor"], 2), c["steps_above"], c["steps"]]
                              for c in cells]
    expect([cell_of(c) for c in cells] == [INJECTED],
           f"report cell outliers {[cell_of(c) for c in cells]}, expected [{INJECTED}]")
    injected = next((c for c in cells if cell_of(c) == INJECTED), None)
    report_factor = injected["factor"] if injected else None
    result["report_factor"] = report_factor and round(report_factor, 2)
    if injected:
        expect(abs(report_factor / real - 1) <= FACTOR_TOLERANCE,
               f"report factor {report_factor:.2f}x, the program measured {real:.2f}x "
               f"(tolerance {FACTOR_TOLERANCE:.0%})")

    # Live: rank 0's findings in its trace and its summary name the same cell alone.
    findings = live_findings(run_dir)
    live_cells = [f for f in findings if f["kind"] == "cell_outlier"]
    result["live_cells"] = [[*cell_of(f), round(f["max_score"], 2), f["first_round"], f["last_round"]]
                            for f in live_cells]
    expect({cell_of(f) for f in live_cells} == {INJECTED},
           f"live cell outliers (rank 0's findings) {sorted({cell_of(f) for f in live_cells})}, "
           f"expected {{{INJECTED}}}")
    with open(os.path.join(run_dir, "s-0.json")) as f:
        cluster = json.load(f)["cluster"]
    expect(cluster["aggregation"] == "mpi", f"aggregation {cluster['aggregation']}, not mpi")
    summary_cells = {(c["rank"], c["layer"], c["phase"], c["op_kind"])
                     for c in cluster["cell_outliers"]}
    expect(summary_cells == {INJECTED},
           f"summary cluster.cell_outliers {sorted(summary_cells)}, expected {{{INJECTED}}}")
    # Live and post-run state the same figure: a finding's largest factor over its rounds (the
    # report's "factor" is the median over the windows that named it, compared above with the
    # program's own clock).
    live_injected = [f for f in live_cells if cell_of(f) == INJECTED]
    expect(injected is None or "max_factor" in injected, "the report's cell has no max_factor")
    if live_injected and injected and "max_factor" in injected:
        live_factor = max(f["max_score"] for f in live_injected)
        result["live_factor"], result["report_max_factor"] = round(live_factor, 2), injected["max_factor"]
        expect(abs(live_factor / injected["max_factor"] - 1) <= LIVE_TOLERANCE,
               f"live factor {live_factor:.2f}x, report max_factor {injected['max_factor']:.2f}x "
               f"(tolerance {LIVE_TOLERANCE:.0%})")

    # No straggler episode for a healthy rank (the slow cell does not make rank 1 one either:
    # one softmax of four blocks is a few percent of its attention).
    live_stragglers = sorted({f["rank"] for f in findings if f["kind"] == "straggler"})
    post_stragglers = sorted({s["rank"] for s in report["stragglers"]})
    result["stragglers_live"], result["stragglers_report"] = live_stragglers, post_stragglers
    expect(report["timeline"]["threshold"] == float(STRAGGLER_THRESHOLD),
           f"report replayed at threshold {report['timeline']['threshold']}, the run's is "
           f"{STRAGGLER_THRESHOLD}")
    healthy = [r for r in range(WORLD) if r != SLOW["rank"]]
    expect(not set(live_stragglers) & set(healthy), f"live straggler episodes on {live_stragglers}")
    expect(not set(post_stragglers) & set(healthy), f"report straggler episodes on {post_stragglers}")

    result["program_medians_ms"] = {r: round(1e3 * s, 3) for r, s in medians.items()}
    result["failures"] = len(failures)
    print("RESULT " + json.dumps(result))
    assert not failures, "\n  ".join([f"{len(failures)} checks failed:"] + failures)
