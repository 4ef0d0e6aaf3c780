#!/usr/bin/env python3
"""Attention found in real models without code changes (docs/DISCOVERY.md): each case launches
tests/integration/discovery_models.py under launch/attnscope-run (real torchrun, 2 ranks, DDP over
Gloo unless said otherwise) and checks the summaries: the exact layer names, forward and backward
(and recompute) calls per layer equal to the steps, the op kinds, the rule that found each layer,
and that the layers' forward time is a plausible share of the step the script measured itself.
Run by ctest: pytest discovery_test.py::test_<case> --build-dir BUILD_DIR --source-dir SOURCE_DIR

Cases:
  llama_eager llama_sdpa gpt2 bert gpt_manual gpt_sdpa vit sdpa_caller mha_train mha_eval   one model each
  checkpointing   llama with gradient_checkpointing_enable(), the GPT under checkpoint_wrapper:
                  recompute is its own phase, backward still linked
  nothing_found   attention in a module whose class name does not say so: one warning, the metric
                  attnscope_nothing_found 1 on the endpoint, summary discovery.nothing_found
  steering        ATTNSCOPE_ATTENTION_MODULES finds it; ATTNSCOPE_ATTENTION_EXCLUDE drops a layer;
                  a bad pattern fails at start with the exact message (launcher and Python API)
  fsdp            llama and the hand-written GPT under FSDP2 (fully_shard per block and at the root)
                  instead of DDP: the same names and checks
  prometheus      llama (the issue's user): a real Prometheus scraping both ranks through the run's
                  file_sd file shows every (rank, layer) with its forward kinds and the calls
  compile         torch.compile(model) of Llama under DDP, 2 ranks, with and without attnscope: every layer
                  inside compiled code, forward and backward, with its kinds; compile time apart; the same
                  losses, graph breaks (0) and graphs; the same in the trace and on both ranks' /metrics
  compile_gpt     the same for the hand-written GPT (unfused attention)
  compile_checkpointing  the GPT with checkpoint_wrapper around every block, compiled: recompute is its
                  own phase
  compile_include the mixer (attention in a class not named so) marked by ATTNSCOPE_ATTENTION_MODULES, compiled
  compile_blocks_fsdp  each Llama block torch.compile'd, then FSDP2 fully_shard per block and at the root
  compile_method  model.compile() of the GPT with SDPA, under DDP
"""
import http.client
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from ranks import OFFLINE, free_ports, load_json, run_env

STEPS = 4

# Per model: exact layer names, the rule, op kinds that must be present in forward, phases.
EXPECTED = {
    "llama_eager": ([f"model.layers.{i}.self_attn" for i in range(2)], "class_name",
                    {"qkv_projection", "positional", "score_matmul", "softmax", "dropout", "context_matmul",
                     "output_projection", "layout_copy"}),
    "llama_sdpa": ([f"model.layers.{i}.self_attn" for i in range(2)], "class_name",
                   {"qkv_projection", "positional", "fused_attention", "output_projection"}),
    "gpt2": ([f"transformer.h.{i}.attn" for i in range(2)], "class_name",
             {"qkv_projection", "fused_attention", "output_projection", "layout_copy"}),
    # BertAttention holds BertSelfAttention and BertSelfOutput (the output projection): one layer.
    "bert": ([f"bert.encoder.layer.{i}.attention" for i in range(2)], "class_name",
             {"qkv_projection", "fused_attention", "output_projection"}),
    "gpt_manual": ([f"blocks.{i}.attn" for i in range(2)], "class_name",
                   {"qkv_projection", "score_matmul", "softmax", "dropout", "context_matmul", "output_projection",
                    "layout_copy"}),
    "gpt_sdpa": ([f"blocks.{i}.attn" for i in range(2)], "class_name",
                 {"qkv_projection", "fused_attention", "output_projection", "layout_copy"}),
    "vit": ([f"blocks.{i}.attn" for i in range(2)], "class_name",
            {"qkv_projection", "fused_attention", "output_projection", "layout_copy"}),
    # Found at its first SDPA call, which is observed as the layer too (that call sees only SDPA).
    "sdpa_caller": ([f"heads.{i}" for i in range(2)], "calls_sdpa",
                    {"qkv_projection", "fused_attention", "output_projection", "layout_copy"}),
    "mha_train": (["encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "pool"], "class_name",
                  {"qkv_projection", "fused_attention", "output_projection"}),
    "mha_eval": (["encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "pool"], "class_name",
                 {"fused_attention"}),
}
# The fused kernel's backend, as SDPA's CPU dispatch picks it for these shapes (dropout in training
# takes the math path; no dropout takes flash).
BACKENDS = {"sdpa_caller": "flash", "llama_sdpa": "flash", "gpt2": "math", "bert": "math", "gpt_sdpa": "math", "vit": "flash"}


class Models:
    """discovery_models.py under launch/attnscope-run (2 ranks unless said, STEPS steps), attnscope
    from the build tree under test."""

    def __init__(self, build, source):
        self.build = build
        self.source = source
        self.run_path = os.path.join(source, "launch", "attnscope-run")
        self.script = os.path.join(source, "tests", "integration", "discovery_models.py")

    def env(self, **extra):
        return run_env(self.build, **OFFLINE, TOKENIZERS_PARALLELISM="false", **extra)

    def launch_args(self, run_dir, model, nproc=2, port=0, extra=()):
        return ([self.run_path, "--run-dir", run_dir, "--interval", "1", "--port", str(port), "--nproc_per_node",
                 str(nproc), "--master_port", str(free_ports(2))] +
                [self.script, model, "--steps", str(STEPS), "--out", os.path.join(run_dir, "own-{rank}.json")] +
                list(extra))

    def run(self, run_dir, model, nproc=2, extra=(), timeout=400, **variables):
        p = subprocess.run(self.launch_args(run_dir, model, nproc, 0, extra), env=self.env(**variables),
                           capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stderr


@pytest.fixture
def models(build_dir, source_dir):
    return Models(build_dir, source_dir)


def summaries(run_dir, nproc=2):
    return [load_json(os.path.join(run_dir, f"summary-{r}.json")) for r in range(nproc)]


def check_model(models, run_dir, model, names, rule, kinds, phases=("forward", "backward"), nproc=2, extra=(),
                **variables):
    code, err = models.run(run_dir, model, nproc, extra, **variables)
    assert code == 0, f"{model}: exit {code}: {err[-3000:]}"
    assert "no attention layer seen" not in err, f"{model}: nothing-found warning on a model with attention: {err[-2000:]}"
    for rank, s in enumerate(summaries(run_dir, nproc)):
        got = [l["name"] for l in s["layers"]]
        assert got == names, f"{model} rank {rank}: layers {got}, expected {names}"
        origins = {o["name"]: o for o in s["discovery"]["layers"]}
        assert sorted(origins) == sorted(names), f"{model} rank {rank}: discovery lists {sorted(origins)}"
        assert all(o["rule"] == rule for o in origins.values()), f"{model} rank {rank}: rules {origins}"
        assert not s["discovery"]["nothing_found"], f"{model} rank {rank}: nothing_found set"
        # The attach closes every call with its results: backward runs on hooks on each call's own
        # autograd nodes, with no RecordFunction callback on every node.
        if "backward" in phases:
            assert s["discovery"]["backward"] == "node_hooks", (
                   f"{model} rank {rank}: backward observed by {s['discovery']['backward']}, not node_hooks")
        own = load_json(os.path.join(run_dir, f"own-{rank}.json"))
        # Every layer call runs inside a step the script timed: over all steps (the first one's
        # one-time work included on both sides) the layers' forward is a share of the steps' time.
        step_s = sum(own["step_seconds"]) / STEPS
        forward_s = 0.0
        for layer in s["layers"]:
            for phase in phases:
                p = layer["phases"].get(phase)
                assert p is not None and p["calls"] == STEPS, (
                       f"{model} rank {rank} {layer['name']}: {phase} {None if p is None else p['calls']} calls, "
                       f"expected {STEPS}; phases {sorted(layer['phases'])}")
            assert set(layer["phases"]) == set(phases), (
                   f"{model} rank {rank} {layer['name']}: phases {sorted(layer['phases'])}, expected {sorted(phases)}")
            fwd = layer["phases"]["forward"]
            assert kinds <= set(fwd["op_kinds"]), (
                   f"{model} rank {rank} {layer['name']}: forward kinds {sorted(fwd['op_kinds'])} lack "
                   f"{sorted(kinds - set(fwd['op_kinds']))}")
            assert "other" not in fwd["op_kinds"] or model in ("bert",), (# BertSelfOutput's LayerNorm is other
                   f"{model} rank {rank} {layer['name']}: forward has 'other': {fwd['op_kinds'].get('other')}")
            if model in BACKENDS:
                assert fwd.get("attention_backends") == {BACKENDS[model]: STEPS}, (
                       f"{model} rank {rank} {layer['name']}: backends {fwd.get('attention_backends')}")
            forward_s += fwd["call"]["total_seconds"] / STEPS
        assert 0 < forward_s < step_s, (f"{model} rank {rank}: layers' forward {forward_s * 1e3:.3f} ms per step, "
                                       f"step {step_s * 1e3:.3f} ms")
        print(f"{model} rank {rank}: {len(names)} layers ({rule}), forward {forward_s * 1e3:.2f} ms of a "
              f"{step_s * 1e3:.2f} ms step")


def test_checkpointing(run_dir, models):
    for model, names in (("llama_ckpt", [f"model.layers.{i}.self_attn" for i in range(2)]),
                         ("gpt_ckpt_wrapper", [f"blocks.{i}.attn" for i in range(2)])):
        d = os.path.join(run_dir, model)
        os.makedirs(d)
        check_model(models, d, model, names, "class_name", {"qkv_projection", "softmax", "output_projection"},
                    phases=("forward", "recompute", "backward"))


def scrape(port):
    # Until the rank listens, a connect to its port (in the ephemeral range) can meet the client's
    # own socket (TCP self-connect) and read back its own request: not an answer, so an OSError
    # like a refused connection, which the callers retry until their deadline.
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except http.client.HTTPException as e:
        raise OSError(f"no HTTP answer on port {port}: {e!r}") from e


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_nothing_found(run_dir, models):
    port = free_ports(2)
    # The script stays up after its steps until the endpoint has been read (deadline 120 s).
    p = subprocess.Popen(models.launch_args(run_dir, "mixer", 2, port, ["--wait-metrics-s", "120"]), env=models.env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = {}
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and len(seen) < 2 and p.poll() is None:
            for rank in (0, 1):
                try:
                    text = scrape(port + rank)
                except OSError:
                    continue
                if metric(text, "attnscope_nothing_found") == 1:
                    seen[rank] = metric(text, "attnscope_attention_layers")
            time.sleep(0.5)
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    assert seen == {0: 0.0, 1: 0.0}, (f"attnscope_nothing_found 1 / attnscope_attention_layers 0 not seen on both "
                                     f"ranks' endpoints: {seen}; {err[-2000:]}")
    warnings = [l for l in err.splitlines() if "no attention layer seen" in l]
    assert len(warnings) == 2, f"expected one warning per rank, got {len(warnings)}: {warnings}"
    for needle in ("attnscope.attention(", "ATTNSCOPE_ATTENTION_MODULES", "attnscope::ModuleScope", "docs/DISCOVERY.md"):
        assert needle in warnings[0], f"the warning does not say {needle!r}: {warnings[0]}"
    print(f"nothing found: one warning per rank, endpoints report it: {warnings[0][:100]}...")


def test_steering(run_dir, models):
    d = os.path.join(run_dir, "include")
    os.makedirs(d)
    check_model(models, d, "mixer", [f"mixers.{i}" for i in range(2)], "include",
                {"qkv_projection", "score_matmul", "softmax", "context_matmul", "output_projection"},
                ATTNSCOPE_ATTENTION_MODULES="^Mixer$")
    d = os.path.join(run_dir, "exclude")
    os.makedirs(d)
    check_model(models, d, "gpt2", ["transformer.h.0.attn"], "class_name", {"qkv_projection", "fused_attention"},
                ATTNSCOPE_ATTENTION_EXCLUDE=r"^transformer\.h\.1\.")
    d = os.path.join(run_dir, "bad")
    os.makedirs(d)
    code, err = models.run(d, "gpt2", ATTNSCOPE_ATTENTION_MODULES="(")
    want = ('ATTNSCOPE_ATTENTION_MODULES="(" is not a valid regular expression (missing ), unterminated subpattern '
            "at position 0); allowed: a Python regular expression, searched in each module's class name and module path")
    assert code == 2 and f"attnscope-run: error: {want}" in err, f"bad pattern: exit {code}: {err[-1500:]}"
    assert not os.path.exists(os.path.join(d, "own-0.json")), "a worker ran despite the bad pattern"
    script = ("import attnscope\ntry:\n    attnscope.start(attention_exclude='[')\nexcept ValueError as e:\n"
              "    print(e)\nelse:\n    raise SystemExit('no error')\n")
    p = subprocess.run([sys.executable, "-c", script], env=models.env(PYTHONPATH=os.path.join(models.build, "python")),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith('ATTNSCOPE_ATTENTION_EXCLUDE="[" is not a valid regular expression'), (
           f"attnscope.start(attention_exclude='['): {p.returncode} {p.stdout} {p.stderr[-1000:]}")
    print("steering: include finds the Mixer, exclude drops h.1, bad patterns fail at start with the message")


def test_fsdp(run_dir, models):
    # FSDP2 (fully_shard per block and at the root) instead of DDP: the same names, backward linked.
    for model in ("llama_sdpa", "gpt_manual"):
        d = os.path.join(run_dir, model)
        os.makedirs(d)
        names, rule, kinds = EXPECTED[model]
        check_model(models, d, model, names, rule, kinds, extra=["--fsdp"])


def test_prometheus(run_dir, models, prometheus):
    # The issue's user: Llama from a small config, 2 ranks, DDP over Gloo; Prometheus shows every
    # layer of every rank with its kinds, forward and backward.
    job_dir = os.path.join(run_dir, "run")
    os.makedirs(job_dir)
    prom = prometheus(os.path.join(job_dir, "targets.json"))  # ready: its port is bound before the ranks' are picked
    port = free_ports(2)
    # The script stays up after its steps until Prometheus has the series (deadline below).
    # Every rank's own per-layer series: the detail a small job turns on (ATTNSCOPE_METRICS_LAYERS;
    # the default shape, the ranks' totals and rank 0's per-layer job summary, is prometheus_test's).
    job = subprocess.Popen(models.launch_args(job_dir, "llama_sdpa", 2, port, ["--wait-metrics-s", "150"]),
                           env=models.env(ATTNSCOPE_METRICS_LAYERS="1"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    names = EXPECTED["llama_sdpa"][0]
    want = {(str(r), n) for r in (0, 1) for n in names}
    kinds_wanted = {"qkv_projection", "positional", "fused_attention", "output_projection"}
    got, calls = {}, {}
    deadline = time.monotonic() + 200
    try:
        while time.monotonic() < deadline and job.poll() is None:
            try:
                kinds = prom.query('attnscope_attention_op_seconds_total{phase="forward"}')
                # Forward calls count at the scope's exit; a step's backward is folded when the step
                # ends, which for the last step (the job idles) is the end of the run.
                counts = prom.query(f'attnscope_attention_seconds_count{{phase="forward"}} == {STEPS} or '
                                    f'attnscope_attention_seconds_count{{phase="backward"}} == {STEPS - 1}')
            except (OSError, ValueError, KeyError):
                time.sleep(0.5)
                continue
            got = {}
            for r in kinds:
                got.setdefault((r["metric"]["rank"], r["metric"]["layer"]), set()).add(r["metric"]["op_kind"])
            calls = {(r["metric"]["rank"], r["metric"]["layer"], r["metric"]["phase"]) for r in counts}
            if set(got) == want and all(kinds_wanted <= k for k in got.values()) and \
                    calls == {(r, n, p) for r, n in want for p in ("forward", "backward")}:
                break
            time.sleep(0.5)
        targets = prom.targets()
    finally:
        job.terminate()
        _, err = job.communicate(timeout=60)
    with open(os.path.join(job_dir, "job.log"), "w") as f:
        f.write(err)
    assert set(got) == want, (f"Prometheus has layers {sorted(got)}, expected {sorted(want)}; targets {targets}; "
                             f"{err[-2000:]}")
    for key, kinds in sorted(got.items()):
        assert kinds_wanted <= kinds, (f"Prometheus rank {key[0]} {key[1]}: forward kinds {sorted(kinds)} lack "
                                      f"{sorted(kinds_wanted - kinds)}")
    assert calls == {(r, n, p) for r, n in want for p in ("forward", "backward")}, (
           f"Prometheus: series with {STEPS} forward and {STEPS - 1} backward calls: {sorted(calls)}")
    print(f"prometheus: {len(want)} (rank, layer) series with kinds {sorted(kinds_wanted)}, "
          f"{STEPS} forward and {STEPS - 1} backward calls each (the last step's backward folds at its end)")


def series(text, name):
    """(labels, value) of each series of one family in a /metrics text."""
    return [(dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) + 1:].rsplit("} ", 1)[0])),
             float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith(name + "{")]


def run_scraped(models, run_dir, model, extra, names, timeout, **variables):
    """The run under attnscope with every rank's per-layer series (ATTNSCOPE_METRICS_LAYERS=1): each
    rank's endpoint is read after the steps, while the script waits for it, until every layer has
    its forward and backward calls of all steps there. (exit code, stderr, {rank: last /metrics
    text})."""
    port, read = free_ports(2), os.path.join(run_dir, "metrics-read")
    args = models.launch_args(run_dir, model, 2, port, list(extra) + ["--wait-metrics-s", "300", "--metrics-read", read])
    texts, done = {}, set()
    with open(os.path.join(run_dir, "job.log"), "w+") as log:
        job = subprocess.Popen(args, env=models.env(ATTNSCOPE_METRICS_LAYERS="1", **variables), stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and job.poll() is None and len(done) < 2:
                if all(os.path.exists(os.path.join(run_dir, f"own-{r}.json")) for r in (0, 1)):
                    deadline = min(deadline, time.monotonic() + 30)  # the steps are done: 30 intervals more
                for rank in set((0, 1)) - done:
                    try:
                        texts[rank] = scrape(port + rank)
                    except OSError:
                        continue
                    calls = {(l.get("layer"), l.get("phase")): v
                             for l, v in series(texts[rank], "attnscope_attention_seconds_count")}
                    if all(calls.get((n, p)) == STEPS for n in names for p in ("forward", "backward")):
                        done.add(rank)
                time.sleep(0.5)
        finally:
            open(read, "w").close()  # the script stops waiting and ends as usual (its summaries)
            try:
                job.wait(timeout=120)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        log.seek(0)
        return job.returncode, log.read(), texts


def check_compiled_metrics(texts, sums, names, kinds, label):
    """The compiled layers on each rank's endpoint: exactly the eager names, forward and backward
    calls, the kinds compiled code calls plus compiled_kernels (never other), and the compilations
    the summary reports."""
    for rank in (0, 1):
        text = texts.get(rank, "")
        got = {}
        for l, v in series(text, "attnscope_attention_op_seconds_total"):
            if "layer" in l:
                got.setdefault((l["layer"], l["phase"]), set()).add(l["op_kind"])
        assert {n for n, _ in got} == set(names), (f"{label} rank {rank}: /metrics layers {sorted(got)}, "
                                                   f"expected {names}")
        for name in names:
            for phase in ("forward", "backward"):
                want = kinds[phase] | {"compiled_kernels"}
                have = got.get((name, phase), set())
                assert want <= have and "other" not in have, (
                       f"{label} rank {rank}: /metrics {name} {phase} kinds {sorted(have)}, expected {sorted(want)}")
        calls = {(l.get("layer"), l.get("phase")): v for l, v in series(text, "attnscope_attention_seconds_count")}
        # A compiled layer's backward is a call between the backward graph's markers, counted at its
        # exit like the forward (an eager layer's backward folds when its step ends).
        want = {(n, p): float(STEPS) for n in names for p in ("forward", "backward")}
        assert calls == want, f"{label} rank {rank}: /metrics calls {calls}, expected {want}"
        compiles, seconds = metric(text, "attnscope_compiles_total"), metric(text, "attnscope_compile_seconds_total")
        d = sums[rank]["discovery"]
        assert compiles == d["compiles"] and seconds is not None and abs(seconds - d["compile_seconds"]) <= 0.01 * \
            d["compile_seconds"], (f"{label} rank {rank}: /metrics compiles {compiles} ({seconds} s), summary "
                                   f"{d['compiles']} ({d['compile_seconds']} s)")
    print(f"{label}: both ranks' /metrics have {names} forward and backward with kinds "
          f"{sorted(kinds['forward'] | {'compiled_kernels'})}, the calls and the compilations")


def compiled_run(models, run_dir, model, how, fsdp=False, scrape_names=None, **variables):
    """The same compiled training with and without attnscope (2 ranks): (summaries, own outputs
    with attnscope, own outputs without, the ranks' /metrics texts when scrape_names names the
    layers to wait for)."""
    extra = ["--compile", how] + (["--fsdp"] if fsdp else [])
    plain = os.path.join(run_dir, "plain")
    os.makedirs(plain)
    p = subprocess.run([os.path.join(models.source, "launch", "torchrun"), "--nproc_per_node", "2", "--master_port",
                        str(free_ports(2)), models.script, model, "--steps", str(STEPS), "--out",
                        os.path.join(plain, "own-{rank}.json")] + extra, env=models.env(), capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, f"{model} compiled ({how}) without attnscope: exit {p.returncode}: {p.stderr[-3000:]}"
    texts = None
    if scrape_names:
        code, err, texts = run_scraped(models, run_dir, model, extra, scrape_names, 900, **variables)
    else:
        code, err = models.run(run_dir, model, 2, extra=extra, timeout=900, **variables)
    assert code == 0, f"{model} compiled ({how}) under attnscope: exit {code}: {err[-3000:]}"
    assert "global hooks" not in err, f"torch.compile warned about attnscope's hook: {err[-2000:]}"
    return (summaries(run_dir, 2), [load_json(os.path.join(run_dir, f"own-{r}.json")) for r in range(2)],
            [load_json(os.path.join(plain, f"own-{r}.json")) for r in range(2)], texts)


def check_compiled(models, run_dir, model, how, kinds, fsdp=False, phases=("forward", "backward"), rule="class_name",
                   metrics=False, **variables):
    """Per layer inside compiled code: the eager names, forward and backward calls equal to the
    steps, the kinds of the ops compiled code calls plus compiled_kernels, compilation apart; and
    nothing added to the job: the same graph breaks and graphs as without attnscope, the same losses."""
    names = {"gpt_ckpt_wrapper": EXPECTED["gpt_manual"][0], "mixer": [f"mixers.{i}" for i in range(2)]}.get(
        model) or EXPECTED[model][0]
    sums, own, base, texts = compiled_run(models, run_dir, model, how, fsdp, names if metrics else None, **variables)
    label = f"{model} compiled ({how}{', FSDP2' if fsdp else ', DDP'})"
    if metrics:
        check_compiled_metrics(texts, sums, names, kinds, label)
    for rank, s in enumerate(sums):
        assert own[rank]["graph_breaks"] == base[rank]["graph_breaks"] == 0, (
               f"{label} rank {rank}: graph breaks {own[rank]['graph_breaks']} under attnscope, "
               f"{base[rank]['graph_breaks']} without")
        assert own[rank]["graphs"] == base[rank]["graphs"], (
               f"{label} rank {rank}: {own[rank]['graphs']} graphs under attnscope, {base[rank]['graphs']} without")
        # The markers copy tensors and bound the layer's kernels: the compiler's float reductions
        # may group differently at a layer's edges, so equal to within float32 rounding of the loss.
        for mine, theirs in zip(own[rank]["losses"], base[rank]["losses"]):
            assert abs(mine - theirs) <= 1e-5 * abs(theirs), (
                   f"{label} rank {rank}: losses {own[rank]['losses']} vs {base[rank]['losses']} without attnscope")
        got = [l["name"] for l in s["layers"]]
        assert got == names, f"{label} rank {rank}: layers {got}, expected {names}"
        origins = {o["name"]: o for o in s["discovery"]["layers"]}
        assert (sorted(origins) == sorted(names) and all(o["rule"] == rule and "compiled code" in o["source"]
                                                         for o in origins.values())), (
                f"{label} rank {rank}: discovery {origins}")
        compile_s = s["discovery"]["compile_seconds"]
        assert s["discovery"]["compiles"] >= 1 and compile_s > 0, (
               f"{label} rank {rank}: compilation not reported: {s['discovery']}")
        for layer in s["layers"]:
            assert set(layer["phases"]) == set(phases), (
                   f"{label} rank {rank} {layer['name']}: phases {sorted(layer['phases'])}, expected {sorted(phases)}")
            for phase in phases:
                p = layer["phases"].get(phase)
                assert p is not None and p["calls"] == STEPS, (
                       f"{label} rank {rank} {layer['name']}: {phase} {None if p is None else p['calls']} calls, "
                       f"expected {STEPS}; phases {sorted(layer['phases'])}")
                # Compilation is never a call: the slowest call is far below the compile time.
                assert p["call"]["max_seconds"] < compile_s / 10, (
                       f"{label} rank {rank} {layer['name']}: {phase} max {p['call']['max_seconds']} s, "
                       f"compile {compile_s} s")
                want = kinds["forward" if phase == "recompute" else phase] | {"compiled_kernels"}
                assert want <= set(p["op_kinds"]), (
                       f"{label} rank {rank} {layer['name']}: {phase} kinds {sorted(p['op_kinds'])} lack "
                       f"{sorted(want - set(p['op_kinds']))}")
                assert "other" not in p["op_kinds"], (
                       f"{label} rank {rank} {layer['name']}: {phase} has 'other': {p['op_kinds'].get('other')}")
        print(f"{label} rank {rank}: {got} forward and backward {STEPS} calls each, kinds "
              f"{sorted(s['layers'][0]['phases']['forward']['op_kinds'])} / "
              f"{sorted(s['layers'][0]['phases']['backward']['op_kinds'])}; graph breaks 0 both ways, "
              f"{own[rank]['graphs']} graphs both ways, losses equal; compile {compile_s:.1f} s apart")


SDPA_KINDS = {"forward": {"qkv_projection", "fused_attention", "output_projection"},
              "backward": {"qkv_projection", "fused_attention", "output_projection"}}


def check_compiled_trace(models, run_dir, names, kinds, label):
    """The compiled layers in the run's traces as attnscope-analyze reads them: the eager names,
    one forward call per layer and step, forward and backward with the kinds compiled code calls
    plus compiled_kernels (the same run's traces: no second compilation)."""
    analyze = os.path.join(models.build, "analysis", "attnscope-analyze")
    report, layers = os.path.join(run_dir, "report.json"), os.path.join(run_dir, "layers.json")
    p = subprocess.run([analyze, os.path.join(run_dir, "traces"), "--quiet", "--json", report, "--layers", layers],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{label}: attnscope-analyze exit {p.returncode}: {p.stderr[-2000:]}"
    described, rows = load_json(layers), load_json(report)["layers"]
    got = [l["layer"] for l in described["layers"]]
    assert sorted(got) == sorted(names), f"{label}: the trace's layers {got}, expected {names}"
    assert described["ranks"] == 2 and described["sampled_steps"] > 0, (
           f"{label}: trace of {described['ranks']} ranks, {described['sampled_steps']} sampled steps")
    for layer in described["layers"]:
        assert layer["calls_per_step"] == 1, (
               f"{label}: {layer['layer']} {layer['calls_per_step']} calls per step in the trace, expected 1")
        per_step = layer["seconds_per_step"]
        for phase in ("forward", "backward"):
            want = kinds[phase] | {"compiled_kernels"}
            assert phase in per_step and want <= set(per_step[phase]), (
                   f"{label}: {layer['layer']} {phase} in the trace: {per_step.get(phase)}, lacks "
                   f"{sorted(want - set(per_step.get(phase, {})))}")
    calls = {(r["layer"], r["phase"]): r["calls"] for r in rows}
    want = {(n, ph): 2 * STEPS for n in names for ph in ("forward", "backward")}  # every step sampled, 2 ranks
    assert calls == want, f"{label}: calls in the report {calls}, expected {want}"
    print(f"{label}: the trace has {sorted(got)}, 1 call per step, forward and backward with compiled_kernels; "
          f"report calls {sorted(calls.items())}")


def test_compile(run_dir, models):
    # nanoGPT's recipe on Llama: torch.compile(model), then DDP (DDPOptimizer splits the graph at
    # bucket boundaries). The same run's traces show the compiled layers to attnscope-analyze.
    # Its ranks' endpoints serve the compiled layers' series (the same run, read after its steps).
    check_compiled(models, run_dir, "llama_sdpa", "model", SDPA_KINDS, metrics=True)
    check_compiled_trace(models, run_dir, EXPECTED["llama_sdpa"][0], SDPA_KINDS, "llama_sdpa compiled (model, DDP)")


# Unfused attention in compiled code: the softmax, masking and dropout are generated kernels, the
# matmuls extern. (Training SDPA with dropout compiles to the same: Inductor decomposes it.)
UNFUSED_KINDS = {"forward": {"qkv_projection", "score_matmul", "context_matmul", "output_projection"},
                 "backward": {"qkv_projection", "score_matmul", "context_matmul", "output_projection"}}


def test_compile_gpt(run_dir, models):
    # The hand-written GPT (q @ k^T, masked softmax, @ v) under whole-model compile and DDP.
    check_compiled(models, run_dir, "gpt_manual", "model", UNFUSED_KINDS)


def test_compile_checkpointing(run_dir, models):
    # checkpoint_wrapper around every block of the GPT, the whole model compiled, DDP: AOTAutograd's
    # partitioner recomputes each checkpointed block, its markers with it, inside the backward graph.
    check_compiled(models, run_dir, "gpt_ckpt_wrapper", "model", UNFUSED_KINDS, phases=("forward", "recompute", "backward"))


def test_compile_include(run_dir, models):
    # Attention in a module whose class name does not say so, named by ATTNSCOPE_ATTENTION_MODULES,
    # inside a compiled model.
    check_compiled(models, run_dir, "mixer", "model", UNFUSED_KINDS, rule="include", ATTNSCOPE_ATTENTION_MODULES="^Mixer$")


def test_compile_blocks_fsdp(run_dir, models):
    # The TorchTitan recipe: each decoder block torch.compile'd, then fully_shard per block and at
    # the root (the blocks' class becomes FSDPOptimizedModule).
    check_compiled(models, run_dir, "llama_sdpa", "blocks", SDPA_KINDS, fsdp=True)


def test_compile_method(run_dir, models):
    # model.compile() (in place, no wrapper module), then DDP. The GPT's SDPA with dropout in training
    # is decomposed by Inductor into the unfused recipe.
    check_compiled(models, run_dir, "gpt_sdpa", "method", UNFUSED_KINDS)


def model_test(model):
    """The test of one model of EXPECTED: its names, rule and kinds, forward only in eval."""
    def test(run_dir, models):
        names, rule, kinds = EXPECTED[model]
        phases = ("forward",) if model == "mha_eval" else ("forward", "backward")
        check_model(models, run_dir, model, names, rule, kinds, phases)
    test.__name__ = test.__qualname__ = f"test_{model}"
    return test


# test_llama_eager, test_llama_sdpa, test_gpt2, ... test_mha_eval: one model each.
for _model in EXPECTED:
    globals()[f"test_{_model}"] = model_test(_model)
