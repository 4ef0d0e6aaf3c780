#!/usr/bin/env python3
"""How well attnscope finds a slow rank: K seeded trials of a 4-rank job of the C++ example, with
no injection and with one rank's one op kind in one layer slowed 1.2x, 1.5x and 2x (real extra
work: examples/train_transformer --slow-kind), scored live (rank 0's detector: its rounds and its
summary) and post-run (attnscope-analyze over the ranks' traces).

Conditions (--conditions): "1" none; "1.5" one op kind of one layer 1.5x (nominal: the op runs
again on half its rows; the report measures what that came to); "L2" the whole attention of one
layer twice (the rank a straggler).

Per condition it reports:
  recall          injected trials in which the slowed rank was found: a straggler episode or a
                  cell outlier naming it (live / post-run)
  false episodes  straggler or cell outlier episodes on healthy ranks, per rank-hour of training
  detect s        seconds from the first round in which the slowed rank had ended a step to the
                  first round that flagged it (live)
  episodes/inj    live straggler episodes of the slowed rank per injected trial (1: unbroken;
                  more: flapping), and the same for the post-run report
  top cell        trials whose top finding for the slowed rank names the injected (layer, phase,
                  op kind): the live cell outlier, else the live attribution; post-run the
                  report's cell outlier with the largest excess
  cell factor     the injected cell's measured factor over the other ranks (post-run), median

--model llama runs a transformers Llama instead (tests/integration/llama_train.py: 4 layers, sdpa
attention, DDP over Gloo, attnscope attached with no code, as `attnscope-run` attaches it); its
injections are "LN" (the layer's attention N times, forward and backward) and "N" (the layer's
o_proj, output_projection, forward and backward: N times for a whole N, else its matmul made
wider by a share N - 1 of its output features, about N times the work in one call).

Trials are seeded: trial i of a condition slows rank 1 + (seed + i) % (world - 1) in layer (seed + i) % 4,
the op kind cycling through --kinds. Extra ATTNSCOPE_* settings (--set NAME=VALUE) apply to every
rank: the detector's before/after comparison runs the same build with different settings.

    .venv/bin/python bench/detection_quality.py build/examples/train_transformer \\
        build/analysis/attnscope-analyze --trials 3 --duration-s 30 [--set NAME=VALUE ...] \\
        [--json results.json]

Takes trials x conditions x (duration + ~2 s): 3 x 5 x 32 s = 8 minutes with the defaults.
"""
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from ranks import rank_env, spawn_ranks, wait_all  # noqa: E402

WORLD = 4
LAYERS = 4
MODEL = ["--layers", str(LAYERS), "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "8",
         "--threads", "1", "--quiet", "--steps", "100000000"]
KINDS = ["softmax", "score_matmul", "context_matmul", "qkv_projection", "output_projection"]
# The kinds the trials cycle through by default: each at least 4% of its layer's forward time in
# this model, so 1.5x moves it by 2% of the layer or more (ATTNSCOPE_CELL_OUTLIER_MIN_SHARE).
DEFAULT_KINDS = ["softmax", "qkv_projection", "output_projection", "score_matmul"]


def injection(condition, trial, seed, kinds):
    """None for "1"; one op kind for "1.5"; the whole layer's attention for "L2" (run twice)."""
    if condition == "1":
        return None
    i = seed + trial
    inj = {"rank": 1 + i % (WORLD - 1), "layer": i % LAYERS, "kind": kinds[i % len(kinds)]}
    if condition.startswith("L"):
        inj["kind"] = None
        inj["factor"] = int(condition[1:])
    else:
        inj["factor"] = int(condition) if condition.isdigit() else float(condition)
    return inj


def live_episodes(rounds, rank, column="straggler"):
    """Runs of consecutive rounds with the flag up, from rank 0's rounds table."""
    runs, prev = [], False
    for rnd, flagged in rounds.get(rank, []):
        if flagged and not prev:
            runs.append([rnd, rnd])
        elif flagged:
            runs[-1][1] = rnd
        prev = flagged
    return runs


def layer_name(args, layer):
    """The name attnscope gives layer `layer`'s attention in the model run."""
    return f"model.layers.{layer}.self_attn" if args.model == "llama" else f"layers.{layer}.attn"


def command(args, inj, trial):
    """The program and arguments of every rank, and what its environment adds."""
    extra = []
    if inj:
        extra = ["--slow-rank", str(inj["rank"]), "--slow-layer", str(inj["layer"]),
                 "--slow-factor", str(inj["factor"])]
        if inj["kind"]:
            extra += ["--slow-kind", inj["kind"]]
    common = ["--duration-s", str(args.duration_s), "--seed", str(trial)] + extra
    if args.model == "example":
        return args.example, MODEL + common, {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.analyze))), "python")
    paths = [os.path.join(root, "python", "bootstrap"), package]
    script = os.path.join(root, "tests", "integration", "llama_train.py")
    return sys.executable, [script, "--layers", str(LAYERS)] + common, {
        "PYTHONPATH": os.pathsep.join(paths), "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def run_trial(args, condition, trial):
    inj = injection(condition, trial, args.seed, args.kinds)
    tmp = tempfile.mkdtemp(prefix="attnscope-dq-")
    trace = os.path.join(tmp, "trace")
    program, argv, added = command(args, inj, trial)
    env = rank_env(tmp, args.interval, "warn", ATTNSCOPE_TRACE_DIR=trace, **dict(args.set), **added)
    began = time.time()
    procs = spawn_ranks(program, WORLD, env, argv, tmp)
    codes = wait_all(procs, args.duration_s + 120)
    wall = time.time() - began
    if codes != [0] * WORLD:
        raise SystemExit(f"trial {condition}/{trial}: ranks exited {codes}; logs in {tmp}")
    report_json = os.path.join(tmp, "report.json")
    p = subprocess.run([args.analyze, trace, "--json", report_json, "--quiet"] + args.analyze_arg,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"trial {condition}/{trial}: analyze exit {p.returncode}: {p.stderr}")
    with open(report_json) as f:
        report = json.load(f)
    # The noise floor: the same traces with every cell above 1.01x and half the default share
    # listed; the largest factor on a healthy rank is how close noise comes to the cell factor.
    loose_json = os.path.join(tmp, "loose.json")
    subprocess.run([args.analyze, trace, "--json", loose_json, "--quiet", "--cell-factor", "1.01",
                    "--cell-min-share", "0.01"], capture_output=True, text=True, timeout=120)
    with open(loose_json) as f:
        loose = json.load(f)
    with open(os.path.join(tmp, "s-0.json")) as f:
        summary = json.load(f)
    db = sqlite3.connect(f"file:{os.path.join(trace, 'rank-0.sqlite')}?mode=ro", uri=True)
    rows = db.execute("SELECT round, rank, unix, straggler, last_step FROM rounds ORDER BY round"
                      ).fetchall()
    db.close()
    rounds, times, stepped = {}, {}, {}
    for rnd, rank, unix, straggler, last_step in rows:
        rounds.setdefault(rank, []).append((rnd, bool(straggler)))
        times[rnd] = unix
        if last_step > 0:
            stepped.setdefault(rank, rnd)
    cluster = summary.get("cluster", {})
    live_cells = cluster.get("cell_outliers", [])
    result = {"condition": condition, "trial": trial, "injection": inj, "wall_s": wall,
              "rounds": len(times), "training_s": args.duration_s}
    # Live: straggler episodes from the rounds (every round rank 0 saw), cell outlier episodes
    # from rank 0's summary.
    result["live_straggler_episodes"] = {r: len(live_episodes(rounds, r)) for r in range(WORLD)}
    result["live_cell_episodes"] = {r: sum(1 for c in live_cells if c["rank"] == r)
                                    for r in range(WORLD)}
    result["post_straggler_episodes"] = {r: sum(1 for e in report["stragglers"] if e["rank"] == r)
                                         for r in range(WORLD)}
    result["post_cell_outliers"] = {r: [c for c in report["cell_outliers"] if c["rank"] == r]
                                    for r in range(WORLD)}
    slowed = inj["rank"] if inj else None
    healthy = [c["factor"] for c in loose["cell_outliers"] if c["rank"] != slowed]
    result["healthy_max_cell_factor"] = max(healthy) if healthy else 1.0
    if inj:
        r = inj["rank"]
        name = layer_name(args, inj["layer"])
        # The example slows the kind's forward; llama_train.py slows o_proj forward and
        # backward, so either phase is the injected cell.
        phases = ("forward", "backward") if args.model == "llama" else ("forward",)
        wanted = {(name, phase, inj["kind"]) for phase in phases}
        # A whole layer slowed: the layer is the right answer, whichever phase and kind.
        matches = ((lambda cell: cell is not None and cell[0] == name) if inj["kind"] is None
                   else (lambda cell: cell is not None and tuple(cell) in wanted))
        first = [runs[0][0] for runs in [live_episodes(rounds, r)] if runs]
        cell_first = [c["first_round"] for c in live_cells if c["rank"] == r]
        flagged = sorted(first + cell_first)
        # From the first round in which the slowed rank had ended a step (a Python model spends
        # its first rounds importing and building).
        start = stepped.get(r, min(times) if times else 0)
        result["live_found"] = bool(flagged)
        result["detect_s"] = times[flagged[0]] - times[start] if flagged else None
        top = None
        cells = [c for c in live_cells if c["rank"] == r]
        if cells:
            top = max(cells, key=lambda c: c["last_round"] - c["first_round"])  # the longest
        else:
            eps = [e for e in cluster.get("stragglers", []) if e["rank"] == r and e["layer"]]
            top = eps[-1] if eps else None
        result["live_top_cell"] = (top["layer"], top["phase"], top["op_kind"]) if top else None
        result["live_top_is_injected"] = matches(result["live_top_cell"])
        post_cells = report["cell_outliers"]
        post_mine = [c for c in post_cells if c["rank"] == r]
        result["post_found"] = bool(post_mine) or result["post_straggler_episodes"][r] > 0
        eps = [e for e in report["stragglers"] if e["rank"] == r and e["layer"]]
        if post_mine:
            result["post_top_cell"] = (post_mine[0]["layer"], post_mine[0]["phase"],
                                       post_mine[0]["op_kind"])
        elif eps:
            result["post_top_cell"] = (eps[0]["layer"], eps[0]["phase"], eps[0]["op_kind"])
        else:
            result["post_top_cell"] = None
        result["post_top_is_injected"] = matches(result["post_top_cell"])
        injected = [c for c in post_mine if (c["layer"], c["phase"], c["op_kind"]) in wanted]
        result["cell_factor"] = injected[0]["factor"] if injected else None
        score = [x["score"] for x in report["ranks"] if x["rank"] == r]
        result["rank_score"] = score[0] if score else None
    if args.keep:
        result["dir"] = tmp
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def summarize(results, condition):
    rs = [x for x in results if x["condition"] == condition]
    healthy_hours = 0.0
    false_live = false_post = 0
    for x in rs:
        slowed = x["injection"]["rank"] if x["injection"] else None
        for r in range(WORLD):
            if r == slowed:
                continue
            healthy_hours += x["training_s"] / 3600.0
            false_live += x["live_straggler_episodes"][r] + x["live_cell_episodes"][r]
            false_post += x["post_straggler_episodes"][r] + len(x["post_cell_outliers"][r])
    name = ("none" if condition == "1" else f"layer {condition[1:]}x" if condition.startswith("L")
            else f"{condition}x kind")
    row = {"condition": name, "trials": len(rs),
           "healthy_max_cell_factor": max(x["healthy_max_cell_factor"] for x in rs),
           "false_live": false_live, "false_post": false_post,
           "false_live_per_rank_hour": false_live / healthy_hours if healthy_hours else 0,
           "false_post_per_rank_hour": false_post / healthy_hours if healthy_hours else 0}
    inj = [x for x in rs if x["injection"]]
    if inj:
        slowed = lambda x: x["injection"]["rank"]  # noqa: E731
        detect = [x["detect_s"] for x in inj if x["detect_s"] is not None]
        factors = [x["cell_factor"] for x in inj if x["cell_factor"] is not None]
        scores = [x["rank_score"] for x in inj if x["rank_score"] is not None]
        row.update({
            "recall_live": sum(x["live_found"] for x in inj) / len(inj),
            "recall_post": sum(x["post_found"] for x in inj) / len(inj),
            "detect_s_median": statistics.median(detect) if detect else None,
            "straggler_episodes_live": [x["live_straggler_episodes"][slowed(x)] for x in inj],
            "straggler_episodes_post": [x["post_straggler_episodes"][slowed(x)] for x in inj],
            "cell_episodes_live": [x["live_cell_episodes"][slowed(x)] for x in inj],
            "top_cell_live": sum(x["live_top_is_injected"] for x in inj) / len(inj),
            "top_cell_post": sum(x["post_top_is_injected"] for x in inj) / len(inj),
            "cell_factor_median": statistics.median(factors) if factors else None,
            "rank_score_median": statistics.median(scores) if scores else None,
        })
    return row


def fmt(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("example")
    ap.add_argument("analyze")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--world", type=int, default=4,
                    help="ranks (2 or more); 2 leaves each rank a core of this 2-core machine")
    ap.add_argument("--duration-s", type=float, default=30)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--conditions", default="1,1.2,1.5,2,L2",
                    help="1: none; X: one op kind X times; LN: the layer's attention N times")
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    ap.add_argument("--model", choices=("example", "llama"), default="example",
                    help="example: the C++ example (the first argument); llama: a transformers "
                         "Llama in Python, attached with no code")
    ap.add_argument("--analyze-arg", action="append", default=[],
                    help="an argument for attnscope-analyze (e.g. --analyze-arg=--cell-factor=100)")
    ap.add_argument("--keep", action="store_true", help="keep each trial's directory")
    ap.add_argument("--set", action="append", default=[],
                    help="NAME=VALUE: an ATTNSCOPE_* setting for every rank")
    ap.add_argument("--json", help="write every trial's figures here")
    args = ap.parse_args()
    if args.world < 2:
        ap.error(f"--world {args.world}: expected 2 or more ranks")
    global WORLD
    WORLD = args.world
    args.kinds = args.kinds.split(",")
    if args.model == "llama":
        args.kinds = ["output_projection"]  # the one kind llama_train.py slows
    for k in args.kinds:
        if k not in KINDS:
            ap.error(f"--kinds: {k!r} is not one of {', '.join(KINDS)}")
    pairs = []
    for s in args.set:
        name, eq, value = s.partition("=")
        if not eq or not name.startswith("ATTNSCOPE_"):
            ap.error(f"--set {s!r}: expected ATTNSCOPE_NAME=VALUE")
        pairs.append((name, value))
    args.set = pairs
    conditions = args.conditions.split(",")
    for c in conditions:
        try:
            ok = float(c[1:] if c.startswith("L") else c) >= 1
        except ValueError:
            ok = False
        if not ok:
            ap.error(f"--conditions: {c!r} is not 1, a factor above 1, or L<whole number>")
        if c.startswith("L") and not c[1:].isdigit():
            ap.error(f"--conditions: {c!r}: a whole layer runs a whole number of times (L2, L3, ...)")
    results = []
    for condition in conditions:
        for trial in range(args.trials):
            x = run_trial(args, condition, trial)
            results.append(x)
            print(json.dumps(x), flush=True)
    rows = [summarize(results, c) for c in conditions]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": dict(args.set), "trials": args.trials,
                       "duration_s": args.duration_s, "results": results, "summary": rows}, f,
                      indent=1)
    print(f"\n{args.trials} trials per condition, {WORLD} ranks, {args.duration_s:g} s each; "
          f"settings {dict(args.set) or 'default'}; analyze {args.analyze_arg or 'default'}")
    print("| condition | recall live / post | false episodes per rank-hour live / post | "
          "detect s (median) | straggler episodes per injection live / post | cell episodes live "
          "| top cell live / post | injected cell factor | rank score | healthy cells up to |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['condition']} | {fmt(r.get('recall_live'))} / {fmt(r.get('recall_post'))} | "
              f"{r['false_live_per_rank_hour']:.1f} / {r['false_post_per_rank_hour']:.1f} "
              f"({r['false_live']} / {r['false_post']}) | {fmt(r.get('detect_s_median'), '{:.1f}')} | "
              f"{r.get('straggler_episodes_live', '-')} / {r.get('straggler_episodes_post', '-')} | "
              f"{r.get('cell_episodes_live', '-')} | "
              f"{fmt(r.get('top_cell_live'))} / {fmt(r.get('top_cell_post'))} | "
              f"{fmt(r.get('cell_factor_median'))} | {fmt(r.get('rank_score_median'), '{:.3f}')} | "
              f"{r['healthy_max_cell_factor']:.2f} |")


if __name__ == "__main__":
    main()
