#!/usr/bin/env python3
"""attnscope-replay: what each attention layer of a run would cost with the other implementations.

    attnscope-replay RUN_DIR [--json FILE] [--html FILE] [--seqs 512,1024,2048] [--reps N] [--no-compile]
    attnscope-replay --synthetic --seqs 128,256,512 [--heads 2,8] [--d-model 256] [--batch 1]
                     [--dtype float32] [--causal] [--fit-from SEQ] [--json FILE] [--html FILE]

Reads the layers of a run's traces (attnscope-analyze RUN_DIR --layers: the kernel shapes each
layer ran with, its implementation and its time per step), then, on this machine's torch and
device, times forward and backward of every implementation that can run those shapes: the eager
matmul-softmax-matmul, scaled_dot_product_attention with each backend the device offers,
flex_attention where this torch has it, and the eager and flex paths under torch.compile. Each
is checked against a float64 reference; per layer the report gives the observed time beside each
alternative's, the memory each keeps for backward (CPU) or its peak (CUDA), the roofline bound of
the shapes, and the projected saving per step and for the run of switching. Layers with the same
shapes are timed once. --seqs times the shapes again at longer sequences and fits the exponent of
time against length.

--synthetic needs no run: the same implementations side by side on random q, k, v of every
(--heads, --seqs) pair (head dim --d-model / heads), with the fitted exponents of time and memory
against length, achieved FLOP/s and bytes/s against ceilings measured here (or --peak-flops and
--peak-bandwidth), as a table, JSON and an HTML page of log-log plots. Docs: docs/ANALYSIS.md,
"attnscope-replay".

Exit status: 0 replayed, 1 replayed but a rank file of the run was skipped, 2 error (the run
directory unreadable, no usable rank file, no layer with recorded shapes, bad usage).
"""
import argparse
import contextlib
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


IMPLEMENTATIONS = ("eager", "eager+compile", "sdpa:flash", "sdpa:math", "sdpa:memory_efficient", "sdpa:cudnn",
                   "flex", "flex+compile")


def allow_recompiles(torch, shapes):
    """torch.compile keeps at most recompile_limit (8) graphs per code object and then runs the
    function uncompiled, with only a warning; every compiled variant here shares one code object
    (the eager closure's, flex_attention's) over all the shapes and lengths timed, so past 8 the
    "+compile" figures would silently be the uncompiled ones. Raised to what this replay needs."""
    config = getattr(getattr(torch, "_dynamo", None), "config", None)
    if config is None:
        return
    for names in (("recompile_limit", "cache_size_limit"),  # the newer name first (an alias in 2.6+)
                  ("accumulated_recompile_limit", "accumulated_cache_size_limit")):
        name = next((n for n in names if hasattr(config, n)), None)
        if name and getattr(config, name) < shapes + 8:
            setattr(config, name, shapes + 8)


def implementations(torch, shape, device, compile_too, only=None):
    """(name, function or None, reason it cannot run here); `only`: the names asked for."""
    out = all_implementations(torch, shape, device, compile_too)
    if not only:
        return out
    kept = [i for i in out if i[0] in only or (i[1] is None and any(o.startswith(i[0]) for o in only))]
    offered = {i[0] for i in out}
    for name in only:  # asked for, but not offered here: said, not dropped silently
        if name not in offered and not any(name.startswith(i[0]) for i in out if i[1] is None):
            why = "left out by --no-compile" if name.endswith("+compile") and not compile_too else \
                f"not offered on {device} (offered: {', '.join(i[0] for i in out if i[1] is not None)})"
            kept.append((name, None, why))
    return kept


def all_implementations(torch, shape, device, compile_too):
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


def time_once(torch, fn, q, k, v, dropout, device, saved=False):
    """(forward s, backward s, memory): on CUDA the peak above the inputs; on a CPU, with `saved`,
    the bytes autograd keeps for backward (a saved-tensors hook sees them; its Python call per
    saved tensor would weigh on the forward time of the implementations that save more, so the
    timed passes run without it), else None."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if saved else contextlib.nullcontext()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    sync(torch, device)
    t0 = time.perf_counter()
    with hooks:
        out = fn(q, k, v, dropout)
    sync(torch, device)
    t1 = time.perf_counter()
    out.backward(torch.ones_like(out))
    sync(torch, device)
    t2 = time.perf_counter()
    memory = torch.cuda.max_memory_allocated() - base if device == "cuda" else \
        sum(kept.values()) if saved else None
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
                # warm-up (and compile); on a CPU it counts what autograd keeps, the same every pass
                _, _, kept = time_once(torch, fn, q, k, v, dropout, device, saved=device != "cuda")
                live.append((name, fn))
                results[name] = {"forward": [], "backward": [], "memory": 0 if device == "cuda" else kept}
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
            if m is not None:  # CUDA: the peak of the timed passes (the warm-up's has compilation's)
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


def calibrate(torch, device, dtype):
    """This machine's ceilings, measured as the plugin measures a host's at start: a float32
    1024x1024 matmul (best of 4) and a copy of 64 MiB (best of 5), after one warm-up run each. On
    CUDA the matmul is 4096x4096 in the replay's dtype: a small float32 one would put the compute
    roof far below what the tensor cores of a half-precision kernel reach."""
    def best_of(reps, fn):
        fn()
        sync(torch, device)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            sync(torch, device)
            best = min(best, time.perf_counter() - t0)
        return best
    n, elems = (4096, (256 << 20) // 4) if device == "cuda" else (1024, (64 << 20) // 4)
    mm_dtype = getattr(torch, dtype) if device == "cuda" else torch.float32
    a, b, c = (torch.randn(n, n, device=device, dtype=mm_dtype) for _ in range(3))
    mm = best_of(4, lambda: torch.mm(a, b, out=c))
    src, dst = torch.rand(elems, device=device), torch.empty(elems, device=device)
    copy = best_of(5, lambda: dst.copy_(src))
    return {"peak_flops_per_second": 2.0 * n ** 3 / mm, "peak_bytes_per_second": 2.0 * elems * 4 / copy,
            "source": "calibration",
            "detail": f"{str(mm_dtype)[6:]} mm {n}x{n} best of 4 ({mm * 1e3:.2f} ms), copy of "
                      f"{elems * 4 >> 20} MiB best of 5 "
                      f"({copy * 1e3:.2f} ms), {torch.get_num_threads()} threads, {device}"}


def synthetic_shape(args, heads, seq):
    return {"batch": args.batch, "heads": heads, "kv_heads": heads, "q_len": seq, "kv_len": seq,
            "head_dim": args.d_model // heads, "dtype": args.dtype, "causal": 1 if args.causal else 0,
            "mask": "none", "dropout": 0.0}


def replay_synthetic(args, torch):
    """Every implementation on random q, k, v for each (heads, length): one row each, with its
    roofline figures; per (implementation, heads) the exponents of time and memory against length
    over the lengths >= --fit-from; the numerical check at the shortest length."""
    device = args.device
    if args.peak_flops and args.peak_bandwidth:
        ceilings = {"peak_flops_per_second": args.peak_flops, "peak_bytes_per_second": args.peak_bandwidth,
                    "source": "options", "detail": "--peak-flops, --peak-bandwidth"}
    else:
        ceilings = calibrate(torch, device, args.dtype)
    pf, pb = ceilings["peak_flops_per_second"], ceilings["peak_bytes_per_second"]
    if not args.no_compile:
        allow_recompiles(torch, 2 * len(args.heads) * len(args.seqs))
    report = {"schema": "attnscope.replay/1", "mode": "synthetic", "device": device,
              "torch_version": torch.__version__, "reps": args.reps, "threads": args.threads,
              "synthetic": {"d_model": args.d_model, "batch": args.batch, "heads": args.heads, "seqs": args.seqs,
                            "dtype": args.dtype, "causal": args.causal, "fit_from": args.fit_from},
              "ceilings": ceilings, "rows": [], "skipped": [], "numerics": [], "fits": []}
    for heads in args.heads:
        shape = synthetic_shape(args, heads, min(args.seqs))
        impls = implementations(torch, shape, device, not args.no_compile, args.impls)
        for seq in args.seqs:
            timed, skipped = measure(torch, impls, shape, device, args.reps, seq=seq)
            bound = roofline(shape, pf, pb, seq)
            for name, r in timed.items():
                sec = r["seconds"]
                report["rows"].append({
                    "implementation": name, "heads": heads, "seq": seq, "head_dim": shape["head_dim"],
                    "forward_seconds": r["forward_seconds"], "backward_seconds": r["backward_seconds"],
                    "seconds": sec, "median_seconds": r["median_seconds"], "memory_bytes": r["memory_bytes"],
                    "flops": bound["flops"], "bytes": bound["bytes"],
                    "intensity": bound["flops"] / bound["bytes"],
                    "flops_per_second": bound["flops"] / sec, "bytes_per_second": bound["bytes"] / sec,
                    "bound": bound["bound"],
                    "fraction_of_roofline": bound["bound_seconds"] / sec if bound["bound_seconds"] else None})
            report["skipped"] += [{"implementation": n, "heads": heads, "seq": seq, "reason": why}
                                  for n, why in skipped.items()]
        ran = {r["implementation"] for r in report["rows"] if r["heads"] == heads}
        for name, fn, _ in impls:
            if name not in ran:
                continue
            try:
                err = numerics(torch, fn, shape, device)
                check = {"max_relative_error": err, "ok": err <= TOLERANCE.get(shape["dtype"], 2e-2)}
            except Exception as e:
                check = {"max_relative_error": None, "ok": False, "error": first_line(e)}
            report["numerics"].append(dict(check, implementation=name, heads=heads, seq=shape["q_len"]))
            rows = [r for r in report["rows"] if r["implementation"] == name and r["heads"] == heads
                    and r["seq"] >= args.fit_from]
            report["fits"].append({
                "implementation": name, "heads": heads, "lengths": len(rows),
                "exponent": fit_exponent([(r["seq"], r["seconds"]) for r in rows]),
                "memory_exponent": fit_exponent([(r["seq"], r["memory_bytes"]) for r in rows])})
    return report


def roof_cell(row):
    frac = row["fraction_of_roofline"]
    return row["bound"] if frac is None else f"{row['bound'][:3]} {frac * 100:.0f}%"


def synthetic_text(r):
    s = r["synthetic"]
    c = r["ceilings"]
    lines = [f"attnscope-replay: synthetic shapes on {r['device']} (torch {r['torch_version']}, {r['threads']} threads): "
             f"d_model {s['d_model']}, batch {s['batch']}, {s['dtype']}{', causal' if s['causal'] else ''}, "
             f"fastest of {r['reps']} passes",
             f"  {'implementation':<16}{'heads':>6}{'seq':>7}{'fwd':>11}{'bwd':>11}{'fwd+bwd':>11}{'memory MiB':>12}"
             f"{'GFLOP/s':>10}{'GB/s':>8}{'flop/B':>8}  roof"]
    for x in r["rows"]:
        lines.append(f"  {x['implementation']:<16}{x['heads']:>6}{x['seq']:>7}{fmt_s(x['forward_seconds']):>11}"
                     f"{fmt_s(x['backward_seconds']):>11}{fmt_s(x['seconds']):>11}{x['memory_bytes'] / 2**20:>12.2f}"
                     f"{x['flops_per_second'] * 1e-9:>10.2f}{x['bytes_per_second'] * 1e-9:>8.2f}{x['intensity']:>8.1f}"
                     f"  {roof_cell(x)}")
    lines.append(f"  roof: the bound of the shapes (mem: bandwidth, com: compute) and the share of it reached; "
                 f"ceilings {c['peak_flops_per_second'] * 1e-9:.1f} GFLOP/s, {c['peak_bytes_per_second'] * 1e-9:.1f} GB/s "
                 f"({c['source']}: {c['detail']})")
    for x in r["skipped"]:
        lines.append(f"  {x['implementation']} heads {x['heads']} seq {x['seq']}: skipped: {x['reason']}")
    for x in r["numerics"]:
        if not x["ok"]:
            lines.append(f"  {x['implementation']} heads {x['heads']}: numerics FAILED "
                         f"({x.get('error') or format(x['max_relative_error'], '.1e')})")
    lines.append(f"  fitted exponent against sequence length (lengths >= {s['fit_from']}): fwd+bwd time, memory")
    for f in r["fits"]:
        e, m = f["exponent"], f["memory_exponent"]
        lines.append(f"    {f['implementation']:<16}{f['heads']:>4} heads: time {'n/a' if e is None else f'{e:.2f}'}, "
                     f"memory {'n/a' if m is None else f'{m:.2f}'} ({f['lengths']} lengths)")
    return "\n".join(lines)


COLOURS = ("#d62728", "#2ca02c", "#9467bd", "#1f77b4", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def svg_plot(title, unit, series):
    """A log-log plot of value against sequence length: series {label: [(seq, value)]}, each label
    "implementation, N heads"; one colour per implementation, dashed after its first head count."""
    values = [v for pts in series.values() for _, v in pts if v and v > 0]
    seqs = sorted({s for pts in series.values() for s, _ in pts})
    if not values or not seqs:
        return ""
    ylo, yhi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    yhi += 1 if yhi <= ylo else 0
    xlo, xhi = math.log2(seqs[0]), math.log2(seqs[-1])
    xhi += 1 if xhi <= xlo else 0
    left, top, w, h = 100, 24, 420, 260
    X = lambda seq: left + w * (math.log2(seq) - xlo) / (xhi - xlo)  # noqa: E731
    Y = lambda v: top + h * (1 - (math.log10(v) - ylo) / (yhi - ylo))  # noqa: E731
    out = [f'<svg width="{left + w + 200}" height="{top + h + 40}" xmlns="http://www.w3.org/2000/svg" '
           f'role="img" aria-label="{html_escape(title)}">',
           f'<text x="{left}" y="14" class="t">{html_escape(title)}</text>']
    for e in range(ylo, yhi + 1):
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{Y(10 ** e):.1f}" y2="{Y(10 ** e):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 5}" y="{Y(10 ** e) + 4:.1f}" text-anchor="end" class="l">1e{e} {unit}</text>')
    for seq in seqs:
        out.append(f'<text x="{X(seq):.1f}" y="{top + h + 16}" text-anchor="middle" class="l">{seq}</text>')
    impls, first_label = [], {}
    for n, (label, pts) in enumerate(series.items()):
        impl = label.split(",")[0]
        if impl not in impls:
            impls.append(impl)
            first_label[impl] = label
        colour = COLOURS[impls.index(impl) % len(COLOURS)]
        dash = "" if first_label[impl] == label else ' stroke-dasharray="5 3"'
        points = " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in pts if v and v > 0)
        if not points:
            continue
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}>'
                   f'<title>{html_escape(label)}</title></polyline>')
        y = top + 10 + n * 16
        out.append(f'<line x1="{left + w + 15}" x2="{left + w + 40}" y1="{y}" y2="{y}" stroke="{colour}" '
                   f'stroke-width="2"{dash}/><text x="{left + w + 45}" y="{y + 4}" class="l">{html_escape(label)}</text>')
    out.append(f'<text x="{left + w // 2}" y="{top + h + 34}" text-anchor="middle" class="l">'
               "sequence length (log scale)</text></svg>")
    return "\n".join(out)


def html_escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def plot_series(report, value):
    """{label: [(seq, value)]} from either mode: synthetic rows, or a run's --seqs points."""
    series = {}
    if report.get("mode") == "synthetic":
        for x in report["rows"]:
            series.setdefault(f"{x['implementation']}, {x['heads']} heads", []).append((x["seq"], value(x)))
        return series
    for i, sh in enumerate(report["shapes"]):
        for seq, at in sh["seqs"].items():
            for name in at["seconds"]:
                x = {"seconds": at["seconds"][name], "memory_bytes": at["memory_bytes"][name], "seq": int(seq)}
                series.setdefault(f"{name}, {sh['shape']['heads']} heads (shape {i + 1})", []).append(
                    (int(seq), value(x)))
    return series


def html_report(report, text):
    plots = [svg_plot("forward + backward time", "ms", plot_series(report, lambda x: x["seconds"] * 1e3)),
             svg_plot("memory (kept for backward on a CPU, peak on CUDA)", "MiB",
                      plot_series(report, lambda x: x["memory_bytes"] / 2**20))]
    if report.get("mode") == "synthetic":
        plots.append(svg_plot("achieved throughput (the shapes' FLOPs over fwd+bwd time)", "GFLOP/s",
                              plot_series(report, lambda x: x["flops_per_second"] * 1e-9)))
    plots = [p for p in plots if p] or ["<p>No lengths to plot (--seqs gives them).</p>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnscope-replay</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:20px}pre{font-size:13px}"
            ".t{font-size:14px;font-weight:bold}.l{font-size:11px}svg{display:inline-block;margin:6px}</style>"
            "</head><body>\n<h1>Attention implementations, replayed</h1>\n"
            + "\n".join(plots) + f"\n<pre>{html_escape(text)}</pre>\n</body></html>\n")


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
    if not args.no_compile:
        allow_recompiles(torch, 2 * len(groups) * (1 + len(args.seqs)))  # the eager and the flex variant
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
        # the observed implementation is timed whatever --impls says: the savings are against it
        only = args.impls and args.impls + [n for n in map(observed_name, members) if n and n not in args.impls]
        impls = implementations(torch, shape, device, not args.no_compile, only)
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


def int_list(p, flag, text, lo, hi, what):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not lo <= int(part) <= hi:
            p.error(f'{flag}="{text}": "{part}" is not {what}; allowed: integers from {lo} to {hi}, comma-separated')
        out.append(int(part))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog="attnscope-replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", default=None, help="the run's trace directory (ATTNSCOPE_TRACE_DIR)")
    p.add_argument("--json", default="", help="write the replay as JSON (schema attnscope.replay/1)")
    p.add_argument("--html", default="", help="write one HTML page: log-log plots of time and memory against "
                                              "length (--seqs, --synthetic) and the table")
    p.add_argument("--seqs", default="", help="comma-separated sequence lengths to extend the shapes to; "
                                              "fits time ~ length^k per implementation")
    p.add_argument("--impls", default="", help="comma-separated implementations to time (default: all): "
                                               + ", ".join(IMPLEMENTATIONS))
    p.add_argument("--reps", type=int, default=10, help="timed passes per implementation (default 10)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variants")
    p.add_argument("--device", default="", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads (default: the run's, from its metadata; with --synthetic torch's)")
    p.add_argument("--analyze", default="", help="the attnscope-analyze to read the run with")
    s = p.add_argument_group("synthetic shapes (no run needed)")
    s.add_argument("--synthetic", action="store_true", help="time random q, k, v of the --heads and --seqs given "
                                                             "instead of a run's shapes")
    s.add_argument("--heads", default=None, help="comma-separated head counts (default 2,8)")
    s.add_argument("--d-model", type=int, default=None, help="model width; head dim = d-model / heads (default 256)")
    s.add_argument("--batch", type=int, default=None, help="batch size (default 1)")
    s.add_argument("--dtype", default=None, help="float32 (default), float64, float16 or bfloat16")
    s.add_argument("--causal", action="store_true", default=None, help="a causal mask (default none)")
    s.add_argument("--fit-from", type=int, default=None, help="fit the exponents on lengths >= this (default: all)")
    s.add_argument("--peak-flops", type=float, default=None, help="the compute ceiling in FLOP/s (with "
                                                                    "--peak-bandwidth; default: measured here)")
    s.add_argument("--peak-bandwidth", type=float, default=None, help="the memory ceiling in bytes/s")
    a = p.parse_args(argv)
    if not 1 <= a.reps <= 10000:
        p.error(f'--reps="{a.reps}" is out of range; allowed: an integer from 1 to 10000')
    if not 0 <= a.threads <= 4096:
        p.error(f'--threads="{a.threads}" is out of range; allowed: an integer from 1 to 4096 (0: the run\'s)')
    a.seqs = int_list(p, "--seqs", a.seqs, 1, 1 << 20, "a length") if a.seqs else []
    if a.device not in ("", "cpu", "cuda"):
        p.error(f'--device="{a.device}"; allowed: cpu, cuda')
    a.impls = [i.strip() for i in a.impls.split(",")] if a.impls else []
    for name in a.impls:
        if name not in IMPLEMENTATIONS:
            p.error(f'--impls="{",".join(a.impls)}": "{name}" is not an implementation; allowed: '
                    + ", ".join(IMPLEMENTATIONS))
    synthetic_only = {"--heads": a.heads, "--d-model": a.d_model, "--batch": a.batch, "--dtype": a.dtype,
                      "--causal": a.causal, "--fit-from": a.fit_from, "--peak-flops": a.peak_flops,
                      "--peak-bandwidth": a.peak_bandwidth}
    if not a.synthetic:
        if a.run_dir is None:
            p.error("give a run's trace directory (RUN_DIR) or --synthetic with --seqs")
        given = [f for f, v in synthetic_only.items() if v is not None]
        if given:
            p.error(f"{', '.join(given)}: only with --synthetic (a run's shapes are its own)")
        return a
    if a.run_dir is not None:
        p.error(f'--synthetic and a run directory ("{a.run_dir}") exclude each other; give one')
    if not a.seqs:
        p.error("--synthetic needs --seqs (the lengths to time, e.g. --seqs 128,256,512)")
    a.heads = int_list(p, "--heads", a.heads, 1, 256, "a head count") if a.heads is not None else [2, 8]
    a.d_model = 256 if a.d_model is None else a.d_model
    if not 1 <= a.d_model <= 65536:
        p.error(f'--d-model="{a.d_model}" is out of range; allowed: an integer from 1 to 65536')
    for h in a.heads:
        if a.d_model % h:
            p.error(f"--d-model {a.d_model} is not divisible by --heads {h}; allowed: head counts that divide it")
    a.batch = 1 if a.batch is None else a.batch
    if not 1 <= a.batch <= 65536:
        p.error(f'--batch="{a.batch}" is out of range; allowed: an integer from 1 to 65536')
    a.dtype = a.dtype or "float32"
    if a.dtype not in DTYPES:
        p.error(f'--dtype="{a.dtype}"; allowed: ' + ", ".join(DTYPES))
    a.causal = bool(a.causal)
    a.fit_from = 1 if a.fit_from is None else a.fit_from
    if a.fit_from > max(a.seqs):
        p.error(f"--fit-from {a.fit_from} is above every length of --seqs ({max(a.seqs)}); nothing to fit")
    if (a.peak_flops is None) != (a.peak_bandwidth is None):
        p.error("--peak-flops and --peak-bandwidth go together (or neither: measured here)")
    for flag, v in (("--peak-flops", a.peak_flops), ("--peak-bandwidth", a.peak_bandwidth)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            p.error(f'{flag}="{v}"; allowed: a positive number')
    return a


def write(path, text, what):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ReplayError(f"cannot write the {what} {path}: {e.strerror or e}")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    status = 0
    try:
        run = None
        if not args.synthetic:
            run, status = read_layers(args.run_dir, find_analyze(args.analyze))
        import torch
        if not args.device:
            args.device = "cuda" if torch.cuda.is_available() else "cpu"
        if args.device == "cuda" and not torch.cuda.is_available():
            raise ReplayError("--device cuda: this torch sees no CUDA device")
        # On a CPU the run's intra-op threads (its metadata), so that the times compare.
        threads = args.threads or (int(run["torch_threads"]) if run and run.get("torch_threads") else 0)
        if threads:
            torch.set_num_threads(threads)
        args.threads = torch.get_num_threads()
        began = time.time()
        report = replay_synthetic(args, torch) if args.synthetic else replay(run, args, torch)
        report["replay_seconds"] = time.time() - began
        text = synthetic_text(report) if args.synthetic else text_report(report)
        print(text)
        print(f"  replayed in {report['replay_seconds']:.1f} s")
        if args.json:
            write(args.json, json.dumps(report, indent=1), "JSON")
        if args.html:
            write(args.html, html_report(report, text), "HTML page")
    except ReplayError as e:
        if e.args and e.args[0]:
            print(f"attnscope-replay: {e.args[0]}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
