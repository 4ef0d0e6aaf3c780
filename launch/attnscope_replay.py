#!/usr/bin/env python3
"""attnscope-replay: what each attention layer of a run would cost with the other implementations.

    attnscope-replay RUN_DIR [--json FILE] [--seqs 512,1024,2048] [--reps N] [--no-compile]

Reads the layers of a run's traces (attnscope-analyze RUN_DIR --layers: the kernel shapes each
layer ran with, its implementation and its time per step), then, on this machine's torch and
device, times forward and backward of every implementation that can run those shapes: the eager
matmul-softmax-matmul, scaled_dot_product_attention with each backend the device offers,
flex_attention where this torch has it, and the eager and flex paths under torch.compile. Each
is checked against a float64 reference; per layer the report gives the observed time beside each
alternative's, the memory each keeps for backward (CPU) or its peak (CUDA), the roofline bound of
the shapes, and the projected saving per step and for the run of switching. Layers with the same
shapes are timed once. --seqs times the shapes again at longer sequences and fits the exponent of
time against length. Docs: docs/ANALYSIS.md, "attnscope-replay".

Exit status: 0 replayed, 1 replayed but a rank file of the run was skipped, 2 error (the run
directory unreadable, no usable rank file, no layer with recorded shapes, bad usage).
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

KERNEL_KINDS = ("fused_attention", "score_matmul", "softmax", "dropout", "context_matmul")
DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16"}
TOLERANCE = {"float64": 1e-7, "float32": 2e-4, "float16": 2e-2, "bfloat16": 4e-2}


class ReplayError(Exception):
    """A run that cannot be replayed: the message says what is wrong."""


def find_analyze(explicit):
    """attnscope-analyze: --analyze, ATTNSCOPE_ANALYZE, beside this Python's scripts, or on PATH."""
    for candidate in (explicit, os.environ.get("ATTNSCOPE_ANALYZE"),
                      os.path.join(os.path.dirname(sys.executable), "attnscope-analyze"),
                      shutil.which("attnscope-analyze")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise ReplayError("attnscope-analyze not found (it comes with `pip install attnscope`); "
                      "pass --analyze PATH or set ATTNSCOPE_ANALYZE")


def read_layers(run_dir, analyze):
    """The run's layers (schema attnscope.layers/1) and attnscope-analyze's exit status; its
    errors (missing, damaged or foreign directories) are the report's own."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "layers.json")
        p = subprocess.run([analyze, run_dir, "--layers", out, "--quiet"], capture_output=True, text=True)
        for line in p.stderr.splitlines():
            print(line.replace("attnscope-analyze:", "attnscope-replay:", 1), file=sys.stderr)
        if p.returncode not in (0, 1) or not os.path.exists(out):
            raise ReplayError(None)  # already said on stderr
        with open(out) as f:
            return json.load(f), p.returncode


# ---- implementations --------------------------------------------------------------------------

def causal_of(shape):
    # An eager layer's mask is a tensor whose content the trace does not keep: replayed as causal
    # (what decoder models pass); SDPA's is_causal is recorded as such.
    return bool(shape.get("causal")) or shape.get("mask") == "tensor"


def make_eager(torch, shape):
    causal = causal_of(shape)
    heads, kv_heads = shape["heads"], shape["kv_heads"]
    masks = {}

    def eager(q, k, v, dropout):
        if kv_heads < heads:  # grouped-query heads repeated as transformers' repeat_kv does
            b, _, lk, d = k.shape
            k = k[:, :, None].expand(b, kv_heads, heads // kv_heads, lk, d).reshape(b, heads, lk, d)
            v = v[:, :, None].expand(b, kv_heads, heads // kv_heads, lk, d).reshape(b, heads, lk, d)
        s = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        if causal:  # an additive mask, as transformers' eager attention adds its causal mask;
            # aligned top-left as SDPA's is_causal and the flex block mask are (query i sees keys <= i)
            key = (s.shape[-2], s.shape[-1], q.device, s.dtype)
            if key not in masks:
                masks[key] = torch.full(key[:2], float("-inf"), device=q.device, dtype=s.dtype).triu(1)
            s = s + masks[key]
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        if dropout > 0:
            p = torch.nn.functional.dropout(p, dropout)
        return torch.matmul(p, v)
    return eager


def sdpa_backends(torch, device):
    from torch.nn.attention import SDPBackend
    names = [("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)]
    if device == "cuda":
        names += [("memory_efficient", SDPBackend.EFFICIENT_ATTENTION)]
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            names += [("cudnn", SDPBackend.CUDNN_ATTENTION)]
    return names


def make_sdpa(torch, shape, backend):
    from torch.nn.attention import sdpa_kernel
    causal = causal_of(shape)
    gqa = shape["kv_heads"] < shape["heads"]

    def sdpa(q, k, v, dropout):
        with sdpa_kernel([backend]):
            kw = {"enable_gqa": True} if gqa else {}
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal, **kw)
    return sdpa


def make_flex(torch, shape, compiled):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    causal = causal_of(shape)
    gqa = shape["kv_heads"] < shape["heads"]
    fn = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
    cache = {}

    def flex(q, k, v, dropout):
        if dropout > 0:
            raise ValueError("flex_attention has no dropout")
        key = (q.shape[-2], k.shape[-2])
        if causal and key not in cache:
            cache[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, key[0], key[1],
                                           device=str(q.device))
        return fn(q, k, v, block_mask=cache.get(key), enable_gqa=gqa)
    return flex


def implementations(torch, shape, device, compile_too):
    """(name, function or None, reason it cannot run here)."""
    out = [("eager", make_eager(torch, shape), "")]
    if compile_too:
        out.append(("eager+compile", torch.compile(make_eager(torch, shape), dynamic=False), ""))
    try:
        for name, backend in sdpa_backends(torch, device):
            out.append((f"sdpa:{name}", make_sdpa(torch, shape, backend), ""))
    except ImportError as e:
        out.append(("sdpa", None, f"this torch has no torch.nn.attention ({e})"))
    try:
        make_flex(torch, shape, False)
        out.append(("flex", make_flex(torch, shape, False), ""))
        if compile_too:
            out.append(("flex+compile", make_flex(torch, shape, True), ""))
    except ImportError as e:
        out.append(("flex", None, f"this torch has no flex_attention ({e})"))
    return out


def observed_name(layer):
    impl = layer.get("implementation", "")
    shape = layer.get("shape") or {}
    if impl.startswith("eager"):
        return "eager"
    if impl.startswith("sdpa") and shape.get("backend"):
        return "sdpa:" + shape["backend"]
    return None  # the kernel the run used is not known: alternatives are timed, no saving projected


# ---- measurement ------------------------------------------------------------------------------

def tensors(torch, shape, device, seq=None, dtype=None, requires_grad=True, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    lq = seq or shape["q_len"]
    lk = seq or shape["kv_len"]
    dt = dtype or getattr(torch, DTYPES.get(shape["dtype"] or "float32", "float32"))
    b, h, hk, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["head_dim"]

    def t(*size):
        x = torch.randn(*size, generator=g, dtype=torch.float64).to(device=device, dtype=dt)
        return x.requires_grad_(requires_grad)
    return t(b, h, lq, d), t(b, hk, lk, d), t(b, hk, lk, d)


def numerics(torch, fn, shape, device):
    """Largest error of forward output and input gradients against the float64 eager reference,
    relative to the reference's largest magnitude (dropout off: it is random)."""
    q, k, v = tensors(torch, shape, device)
    ref_q, ref_k, ref_v = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = make_eager(torch, shape)(ref_q, ref_k, ref_v, 0.0)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(device)
    ref.backward(grad)
    out = fn(q, k, v, 0.0)
    out.backward(grad.to(out.dtype))
    worst = 0.0
    for got, want in ((out, ref), (q.grad, ref_q.grad), (k.grad, ref_k.grad), (v.grad, ref_v.grad)):
        scale = max(float(want.detach().abs().max()), 1e-12)
        worst = max(worst, float((got.detach().double() - want.detach()).abs().max()) / scale)
    return worst


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_once(torch, fn, q, k, v, dropout, device):
    """(forward s, backward s, bytes kept for backward or CUDA peak)."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    sync(torch, device)
    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(q, k, v, dropout)
    sync(torch, device)
    t1 = time.perf_counter()
    out.backward(torch.ones_like(out))
    sync(torch, device)
    t2 = time.perf_counter()
    memory = torch.cuda.max_memory_allocated() - base if device == "cuda" else sum(kept.values())
    for x in (q, k, v):
        x.grad = None
    return t1 - t0, t2 - t1, memory


def measure(torch, impls, shape, device, reps, seq=None):
    """Per runnable implementation: the fastest forward, backward and forward+backward over `reps` passes that run
    every implementation once each (interleaved, so a burst of load hits one pass of each), after a
    warm-up pass (compilation happens there). Implementations that fail are dropped with the reason."""
    q, k, v = tensors(torch, shape, device, seq)
    dropout = shape.get("dropout") or 0.0
    results, skipped = {}, {}
    live = []
    for name, fn, reason in impls:
        if fn is None:
            skipped[name] = reason
            continue
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            try:
                time_once(torch, fn, q, k, v, dropout, device)  # warm-up (and compile)
                live.append((name, fn))
                results[name] = {"forward": [], "backward": [], "memory": 0}
            except Exception as e:  # an unsupported combination: say why, go on with the others
                # SDPA says why a forced backend cannot run in warnings before it raises.
                why = [re.sub(r"\s*\(Triggered internally at [^)]*\)", "", str(w.message)).strip() for w in said]
                why = [w.splitlines()[0] for w in why if w and not w.endswith(":")]
                skipped[name] = first_line(e) + (f" ({'; '.join(why[:2])})" if why else "")
    for _ in range(reps):
        for name, fn in live:
            f, b, m = time_once(torch, fn, q, k, v, dropout, device)
            r = results[name]
            r["forward"].append(f)
            r["backward"].append(b)
            r["memory"] = max(r["memory"], m)
    # The fastest pass (as timeit does): on a machine shared with other work the slow passes are
    # other work's, and the fastest is the steadiest figure; the median is kept beside it.
    summary = {}
    for name, r in results.items():
        total = [f + b for f, b in zip(r["forward"], r["backward"])]
        summary[name] = {"forward_seconds": min(r["forward"]), "backward_seconds": min(r["backward"]),
                         "seconds": min(total), "median_seconds": statistics.median(total),
                         "memory_bytes": r["memory"]}
    return summary, skipped


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def roofline(shape, peak_flops, peak_bytes, seq=None):
    """FLOPs and minimum bytes of one forward+backward, and the time the ceilings allow."""
    lq, lk = seq or shape["q_len"], seq or shape["kv_len"]
    b, h, hk, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["head_dim"]
    elt = {"float64": 8, "float32": 4}.get(shape["dtype"], 2)
    pairs = lq * lk / 2 if causal_of(shape) else lq * lk
    flops = 4 * b * h * pairs * d * 3.5  # forward 2 matmuls; backward 5 (flash recomputes scores)
    qo = b * h * lq * d * elt
    kv = b * hk * lk * d * elt
    moved = (2 * qo + 2 * kv) + (4 * qo + 4 * kv)  # forward reads q, k, v, writes o; backward twice
    out = {"flops": flops, "bytes": moved, "bound_seconds": None, "bound": "unknown"}
    if peak_flops and peak_bytes:
        tc, tm = flops / peak_flops, moved / peak_bytes
        out.update(bound_seconds=max(tc, tm), bound="compute" if tc >= tm else "memory")
    return out


def fit_exponent(points):
    """Least-squares slope of log(time) against log(length)."""
    pts = [(math.log(l), math.log(t)) for l, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else None


# ---- the replay --------------------------------------------------------------------------------

def shape_key(shape):
    return tuple(shape.get(k) for k in ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "dtype",
                                        "causal", "mask", "dropout"))


def observed_seconds(layer):
    """The layer's kernel time per step in the run (its attention kinds, forward, backward and
    recompute), the projections and positional work left out."""
    total = 0.0
    for phase in layer.get("seconds_per_step", {}).values():
        total += sum(phase.get(k) or 0.0 for k in KERNEL_KINDS)
    return total


def replay(run, args, torch):
    device = args.device
    layers = run["layers"]
    with_shape = [l for l in layers if l.get("shape")]
    if not with_shape:
        raise ReplayError(f"{run['trace_dir']}: no layer has recorded attention shapes (traces written by an "
                          "attnscope without shape capture, or with ATTNSCOPE_ROOFLINE=0); the run's layers: "
                          + ", ".join(l["layer"] for l in layers[:8]) + ("" if layers else "none"))
    groups = {}
    for l in with_shape:
        groups.setdefault(shape_key(l["shape"]), []).append(l)
    steps = run.get("steps_seen") or 0
    peak_flops, peak_bytes = run.get("peak_flops_per_second"), run.get("peak_bytes_per_second")
    report = {"schema": "attnscope.replay/1", "trace_dir": run["trace_dir"], "device": device,
              "torch_version": torch.__version__, "run_torch_version": run.get("torch_version", ""),
              "run_device": run.get("device", ""), "steps_seen": steps, "reps": args.reps,
              "threads": args.threads,
              "ceilings": {"peak_flops_per_second": peak_flops, "peak_bytes_per_second": peak_bytes,
                           "source": "the run's trace metadata"},
              "layers": [], "no_shapes": [l["layer"] for l in layers if not l.get("shape")], "shapes": []}
    for key, members in groups.items():
        shape = members[0]["shape"]
        impls = implementations(torch, shape, device, not args.no_compile)
        timed, skipped = measure(torch, impls, shape, device, args.reps)
        checks = {}
        for name, fn, _ in impls:
            if name in timed:
                try:
                    err = numerics(torch, fn, shape, device)
                    checks[name] = {"max_relative_error": err, "ok": err <= TOLERANCE.get(shape["dtype"], 2e-2)}
                except Exception as e:
                    checks[name] = {"max_relative_error": None, "ok": False, "error": first_line(e)}
        bound = roofline(shape, peak_flops, peak_bytes)
        scaling = {}
        if args.seqs:
            runnable = [(n, f, r) for n, f, r in impls if n in timed]
            per_seq = {}
            for seq in args.seqs:
                got, why = measure(torch, runnable, shape, device, max(1, args.reps // 2), seq=seq)
                per_seq[seq] = {"seconds": {n: r["seconds"] for n, r in got.items()},
                                "memory_bytes": {n: r["memory_bytes"] for n, r in got.items()},
                                "skipped": why, "bound_seconds": roofline(shape, peak_flops, peak_bytes, seq)["bound_seconds"]}
            for name in timed:
                pts = [(s, per_seq[s]["seconds"][name]) for s in args.seqs if name in per_seq[s]["seconds"]]
                scaling[name] = {"exponent": fit_exponent(pts), "points": pts}
            report["shapes"].append({"shape": shape, "seqs": {str(s): v for s, v in per_seq.items()},
                                     "scaling": scaling})
        for l in members:
            observed = observed_name(l)
            calls = l.get("calls_per_step") or 1
            base = timed.get(observed) if observed else None
            alternatives = []
            for name, r in timed.items():
                saving = (base["seconds"] - r["seconds"]) * calls if base else None
                alternatives.append({
                    "implementation": name, "forward_seconds": r["forward_seconds"],
                    "backward_seconds": r["backward_seconds"], "seconds": r["seconds"],
                    "median_seconds": r["median_seconds"],
                    "memory_bytes": r["memory_bytes"], "numerics": checks.get(name),
                    "fraction_of_roofline": (bound["bound_seconds"] / r["seconds"]) if bound["bound_seconds"] else None,
                    "saving_seconds_per_step": saving,
                    "saving_seconds_per_run": saving * steps if saving is not None and steps else None})
            alternatives.sort(key=lambda a: a["seconds"])
            report["layers"].append({
                "layer": l["layer"], "implementation": l.get("implementation"), "replayed_as": observed,
                "shape": shape, "calls_per_step": calls, "observed_seconds_per_step": observed_seconds(l),
                "roofline": bound, "alternatives": alternatives,
                "skipped": [{"implementation": n, "reason": r} for n, r in skipped.items()]})
    # Switching every replayed layer to one implementation: the savings summed over layers.
    totals = {}
    for l in report["layers"]:
        for a in l["alternatives"]:
            if a["saving_seconds_per_step"] is not None and a["implementation"] != l["replayed_as"]:
                t = totals.setdefault(a["implementation"], {"implementation": a["implementation"], "layers": 0,
                                                            "saving_seconds_per_step": 0.0})
                t["layers"] += 1
                t["saving_seconds_per_step"] += a["saving_seconds_per_step"]
    for t in totals.values():
        t["saving_seconds_per_run"] = t["saving_seconds_per_step"] * steps if steps else None
    report["totals"] = sorted(totals.values(), key=lambda t: -t["saving_seconds_per_step"])
    return report


def text_report(r):
    lines = [f"attnscope-replay: {r['trace_dir']}: {len(r['layers'])} layers replayed on {r['device']} "
             f"(torch {r['torch_version']}, {r['threads']} threads; the run: {r['run_device'] or 'device not stated'}, "
             f"torch {r['run_torch_version'] or '?'}), {r['steps_seen']:.0f} steps in the run"]
    for name in r["no_shapes"]:
        lines.append(f"  {name}: no shapes recorded, not replayed")
    for l in r["layers"]:
        s = l["shape"]
        lines.append(f"  {l['layer']}: {l['implementation']}, batch {s['batch']} heads {s['heads']} (kv {s['kv_heads']}) "
                     f"q {s['q_len']} kv {s['kv_len']} d {s['head_dim']} {s['dtype']}"
                     f"{' causal' if causal_of(s) else ''}; observed kernel time {fmt_s(l['observed_seconds_per_step'])}/step"
                     + (f"; roofline bound {fmt_s(l['roofline']['bound_seconds'])} ({l['roofline']['bound']})"
                        if l["roofline"]["bound_seconds"] else ""))
        for a in l["alternatives"]:
            n = a["numerics"] or {}
            err = n.get("max_relative_error")
            mark = " (observed)" if a["implementation"] == l["replayed_as"] else ""
            saving = a["saving_seconds_per_step"]
            lines.append(f"    {a['implementation']:<14} fwd+bwd {fmt_s(a['seconds'])} (fwd {fmt_s(a['forward_seconds'])}), "
                         f"memory {a['memory_bytes'] / 2**20:.2f} MiB, numerics "
                         f"{'ok' if n.get('ok') else 'FAILED'} ({err:.1e})" if err is not None else
                         f"    {a['implementation']:<14} fwd+bwd {fmt_s(a['seconds'])}, numerics failed: {n.get('error')}")
            if saving is not None and not mark:
                lines[-1] += f", saves {fmt_s(saving)}/step" + (f", {saving * r['steps_seen']:.2f} s/run" if r["steps_seen"] else "")
            lines[-1] += mark
        for s in l["skipped"]:
            lines.append(f"    {s['implementation']:<14} skipped: {s['reason']}")
    for t in r["totals"]:
        lines.append(f"  every layer ({t['layers']}) as {t['implementation']}: saves {fmt_s(t['saving_seconds_per_step'])}"
                     f"/step" + (f", {t['saving_seconds_per_run']:.2f} s over the run's {r['steps_seen']:.0f} steps"
                                 if t["saving_seconds_per_run"] is not None else ""))
    for sh in r["shapes"]:
        for name, sc in sh["scaling"].items():
            if sc["exponent"] is not None:
                lines.append(f"  scaling {name}: time ~ length^{sc['exponent']:.2f} over {[p[0] for p in sc['points']]}")
    return "\n".join(lines)


def fmt_s(s):
    if s is None:
        return "-"
    a = abs(s)
    return f"{s * 1e6:.0f} us" if a < 1e-3 else f"{s * 1e3:.2f} ms" if a < 1 else f"{s:.2f} s"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="attnscope-replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="the run's trace directory (ATTNSCOPE_TRACE_DIR)")
    p.add_argument("--json", default="", help="write the replay as JSON (schema attnscope.replay/1)")
    p.add_argument("--seqs", default="", help="comma-separated sequence lengths to extend the shapes to; "
                                              "fits time ~ length^k per implementation")
    p.add_argument("--reps", type=int, default=10, help="timed passes per implementation (default 10)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variants")
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads (default: the run's, from its metadata)")
    p.add_argument("--analyze", default="", help="the attnscope-analyze to read the run with")
    a = p.parse_args(argv)
    if not 1 <= a.reps <= 10000:
        p.error(f'--reps="{a.reps}" is out of range; allowed: an integer from 1 to 10000')
    if not 0 <= a.threads <= 4096:
        p.error(f'--threads="{a.threads}" is out of range; allowed: an integer from 1 to 4096 (0: the run\'s)')
    seqs = []
    for part in filter(None, a.seqs.split(",")):
        if not part.strip().isdigit() or not 1 <= int(part) <= 1 << 20:
            p.error(f'--seqs="{a.seqs}": "{part}" is not a length; allowed: integers from 1 to 1048576, comma-separated')
        seqs.append(int(part))
    a.seqs = seqs
    if a.device not in ("", "cpu", "cuda"):
        p.error(f'--device="{a.device}"; allowed: cpu, cuda')
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run, status = read_layers(args.run_dir, find_analyze(args.analyze))
        import torch
        if not args.device:
            args.device = "cuda" if torch.cuda.is_available() else "cpu"
        if args.device == "cuda" and not torch.cuda.is_available():
            raise ReplayError("--device cuda: this torch sees no CUDA device")
        # On a CPU the run's intra-op threads (its metadata), so that the times compare.
        threads = args.threads or (int(run["torch_threads"]) if run.get("torch_threads") else 0)
        if threads:
            torch.set_num_threads(threads)
        args.threads = torch.get_num_threads()
        began = time.time()
        report = replay(run, args, torch)
        report["replay_seconds"] = time.time() - began
    except ReplayError as e:
        if e.args and e.args[0]:
            print(f"attnscope-replay: {e.args[0]}", file=sys.stderr)
        return 2
    print(text_report(report))
    print(f"  replayed in {report['replay_seconds']:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
