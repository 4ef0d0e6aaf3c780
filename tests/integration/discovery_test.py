#!/usr/bin/env python3
"""Attention found in real models without code changes (docs/DISCOVERY.md): each case launches
tests/integration/discovery_models.py under launch/attnscope-run (real torchrun, 2 ranks, DDP over
Gloo unless said otherwise) and checks the summaries: the exact layer names, forward and backward
(and recompute) calls per layer equal to the steps, the op kinds, the rule that found each layer,
and that the layers' forward time is a plausible share of the step the script measured itself.
Usage: discovery_test.py CASE BUILD_DIR SOURCE_DIR

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
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

CASE, BUILD, SOURCE = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ranks import check, free_ports  # noqa: E402

RUN = os.path.join(SOURCE, "launch", "attnscope-run")
MODELS = os.path.join(SOURCE, "tests", "integration", "discovery_models.py")
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


def env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSCOPE_") and k not in ("RANK", "WORLD_SIZE")}
    e.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", ATTNSCOPE_PYTHONPATH=os.path.join(BUILD, "python"),
             ATTNSCOPE_BIND="127.0.0.1", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    e.update(extra)
    return e


def launch_args(tmp, model, nproc=2, port=0, extra=()):
    return ([RUN, "--run-dir", tmp, "--interval", "1", "--port", str(port), "--nproc_per_node", str(nproc),
             "--master_port", str(free_ports(2))] + [MODELS, model, "--steps", str(STEPS),
                                                     "--out", os.path.join(tmp, "own-{rank}.json")] + list(extra))


def run(tmp, model, nproc=2, extra=(), timeout=400, **variables):
    p = subprocess.run(launch_args(tmp, model, nproc, 0, extra), env=env(**variables), capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stderr


def load(path):
    with open(path) as f:
        return json.load(f)


def summaries(tmp, nproc=2):
    return [load(os.path.join(tmp, f"summary-{r}.json")) for r in range(nproc)]


def check_model(tmp, model, names, rule, kinds, phases=("forward", "backward"), nproc=2, extra=(), **variables):
    code, err = run(tmp, model, nproc, extra, **variables)
    check(code == 0, f"{model}: exit {code}: {err[-3000:]}")
    check("no attention layer seen" not in err, f"{model}: nothing-found warning on a model with attention: {err[-2000:]}")
    for rank, s in enumerate(summaries(tmp, nproc)):
        got = [l["name"] for l in s["layers"]]
        check(got == names, f"{model} rank {rank}: layers {got}, expected {names}")
        origins = {o["name"]: o for o in s["discovery"]["layers"]}
        check(sorted(origins) == sorted(names), f"{model} rank {rank}: discovery lists {sorted(origins)}")
        check(all(o["rule"] == rule for o in origins.values()), f"{model} rank {rank}: rules {origins}")
        check(not s["discovery"]["nothing_found"], f"{model} rank {rank}: nothing_found set")
        # The attach closes every call with its results: backward runs on hooks on each call's own
        # autograd nodes, with no RecordFunction callback on every node.
        if "backward" in phases:
            check(s["discovery"]["backward"] == "node_hooks",
                  f"{model} rank {rank}: backward observed by {s['discovery']['backward']}, not node_hooks")
        own = load(os.path.join(tmp, f"own-{rank}.json"))
        # Every layer call runs inside a step the script timed: over all steps (the first one's
        # one-time work included on both sides) the layers' forward is a share of the steps' time.
        step_s = sum(own["step_seconds"]) / STEPS
        forward_s = 0.0
        for layer in s["layers"]:
            for phase in phases:
                p = layer["phases"].get(phase)
                check(p is not None and p["calls"] == STEPS,
                      f"{model} rank {rank} {layer['name']}: {phase} {None if p is None else p['calls']} calls, "
                      f"expected {STEPS}; phases {sorted(layer['phases'])}")
            check(set(layer["phases"]) == set(phases),
                  f"{model} rank {rank} {layer['name']}: phases {sorted(layer['phases'])}, expected {sorted(phases)}")
            fwd = layer["phases"]["forward"]
            check(kinds <= set(fwd["op_kinds"]),
                  f"{model} rank {rank} {layer['name']}: forward kinds {sorted(fwd['op_kinds'])} lack "
                  f"{sorted(kinds - set(fwd['op_kinds']))}")
            check("other" not in fwd["op_kinds"] or model in ("bert",),  # BertSelfOutput's LayerNorm is other
                  f"{model} rank {rank} {layer['name']}: forward has 'other': {fwd['op_kinds'].get('other')}")
            if model in BACKENDS:
                check(fwd.get("attention_backends") == {BACKENDS[model]: STEPS},
                      f"{model} rank {rank} {layer['name']}: backends {fwd.get('attention_backends')}")
            forward_s += fwd["call"]["total_seconds"] / STEPS
        check(0 < forward_s < step_s, f"{model} rank {rank}: layers' forward {forward_s * 1e3:.3f} ms per step, "
                                      f"step {step_s * 1e3:.3f} ms")
        print(f"{model} rank {rank}: {len(names)} layers ({rule}), forward {forward_s * 1e3:.2f} ms of a "
              f"{step_s * 1e3:.2f} ms step")


def case_checkpointing(tmp):
    for model, names in (("llama_ckpt", [f"model.layers.{i}.self_attn" for i in range(2)]),
                         ("gpt_ckpt_wrapper", [f"blocks.{i}.attn" for i in range(2)])):
        d = os.path.join(tmp, model)
        os.makedirs(d)
        check_model(d, model, names, "class_name", {"qkv_projection", "softmax", "output_projection"},
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


def case_nothing_found(tmp):
    port = free_ports(2)
    # The script stays up after its steps until the endpoint has been read (deadline 120 s).
    p = subprocess.Popen(launch_args(tmp, "mixer", 2, port, ["--wait-metrics-s", "120"]), env=env(),
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
    check(seen == {0: 0.0, 1: 0.0}, f"attnscope_nothing_found 1 / attnscope_attention_layers 0 not seen on both "
                                    f"ranks' endpoints: {seen}; {err[-2000:]}")
    warnings = [l for l in err.splitlines() if "no attention layer seen" in l]
    check(len(warnings) == 2, f"expected one warning per rank, got {len(warnings)}: {warnings}")
    for needle in ("attnscope.attention(", "ATTNSCOPE_ATTENTION_MODULES", "attnscope::ModuleScope", "docs/DISCOVERY.md"):
        check(needle in warnings[0], f"the warning does not say {needle!r}: {warnings[0]}")
    print(f"nothing found: one warning per rank, endpoints report it: {warnings[0][:100]}...")


def case_steering(tmp):
    d = os.path.join(tmp, "include")
    os.makedirs(d)
    check_model(d, "mixer", [f"mixers.{i}" for i in range(2)], "include",
                {"qkv_projection", "score_matmul", "softmax", "context_matmul", "output_projection"},
                ATTNSCOPE_ATTENTION_MODULES="^Mixer$")
    d = os.path.join(tmp, "exclude")
    os.makedirs(d)
    check_model(d, "gpt2", ["transformer.h.0.attn"], "class_name", {"qkv_projection", "fused_attention"},
                ATTNSCOPE_ATTENTION_EXCLUDE=r"^transformer\.h\.1\.")
    d = os.path.join(tmp, "bad")
    os.makedirs(d)
    code, err = run(d, "gpt2", ATTNSCOPE_ATTENTION_MODULES="(")
    want = ('ATTNSCOPE_ATTENTION_MODULES="(" is not a valid regular expression (missing ), unterminated subpattern '
            "at position 0); allowed: a Python regular expression, searched in each module's class name and module path")
    check(code == 2 and f"attnscope-run: error: {want}" in err, f"bad pattern: exit {code}: {err[-1500:]}")
    check(not os.path.exists(os.path.join(d, "own-0.json")), "a worker ran despite the bad pattern")
    script = ("import attnscope\ntry:\n    attnscope.start(attention_exclude='[')\nexcept ValueError as e:\n"
              "    print(e)\nelse:\n    raise SystemExit('no error')\n")
    p = subprocess.run([sys.executable, "-c", script], env=env(PYTHONPATH=os.path.join(BUILD, "python")),
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and p.stdout.startswith('ATTNSCOPE_ATTENTION_EXCLUDE="[" is not a valid regular expression'),
          f"attnscope.start(attention_exclude='['): {p.returncode} {p.stdout} {p.stderr[-1000:]}")
    print("steering: include finds the Mixer, exclude drops h.1, bad patterns fail at start with the message")


def case_fsdp(tmp):
    # FSDP2 (fully_shard per block and at the root) instead of DDP: the same names, backward linked.
    for model in ("llama_sdpa", "gpt_manual"):
        d = os.path.join(tmp, model)
        os.makedirs(d)
        names, rule, kinds = EXPECTED[model]
        check_model(d, model, names, rule, kinds, extra=["--fsdp"])


class Prometheus:
    """A real Prometheus scraping the ranks listed in the run's file_sd file (targets.json)."""

    def __init__(self, tmp, targets):
        self.port = free_ports(1)
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n"
                    "  - job_name: attnscope\n    honor_labels: true\n    file_sd_configs:\n"
                    f"      - files: ['{targets}']\n        refresh_interval: 1s\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                                      f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode())["data"]["result"]

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Prometheus not ready within {timeout} s")

    def targets(self):
        """(scrape URL, health, last error) of each active target."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/targets", timeout=5) as r:
            active = json.loads(r.read().decode())["data"]["activeTargets"]
        return [(t["scrapeUrl"], t["health"], t["lastError"]) for t in active]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def case_prometheus(tmp):
    # The user: Llama from a small config, 2 ranks, DDP over Gloo; Prometheus shows every
    # layer of every rank with its kinds, forward and backward.
    run_dir = os.path.join(tmp, "run")
    os.makedirs(run_dir)
    prom = Prometheus(tmp, os.path.join(run_dir, "targets.json"))
    prom.wait_ready()  # its port is bound before the ranks' ports are picked
    port = free_ports(2)
    # The script stays up after its steps until Prometheus has the series (deadline below).
    # Every rank's own per-layer series: the detail a small job turns on (ATTNSCOPE_METRICS_LAYERS;
    # the default shape, the ranks' totals and rank 0's per-layer job summary, is prometheus_test's).
    job = subprocess.Popen(launch_args(run_dir, "llama_sdpa", 2, port, ["--wait-metrics-s", "150"]),
                           env=env(ATTNSCOPE_METRICS_LAYERS="1"),
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
        prom.stop()
    with open(os.path.join(run_dir, "job.log"), "w") as f:
        f.write(err)
    check(set(got) == want, f"Prometheus has layers {sorted(got)}, expected {sorted(want)}; targets {targets}; "
                            f"{err[-2000:]}")
    for key, kinds in sorted(got.items()):
        check(kinds_wanted <= kinds, f"Prometheus rank {key[0]} {key[1]}: forward kinds {sorted(kinds)} lack "
                                     f"{sorted(kinds_wanted - kinds)}")
    check(calls == {(r, n, p) for r, n in want for p in ("forward", "backward")},
          f"Prometheus: series with {STEPS} forward and {STEPS - 1} backward calls: {sorted(calls)}")
    print(f"prometheus: {len(want)} (rank, layer) series with kinds {sorted(kinds_wanted)}, "
          f"{STEPS} forward and {STEPS - 1} backward calls each (the last step's backward folds at its end)")


def series(text, name):
    """(labels, value) of each series of one family in a /metrics text."""
    return [(dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) + 1:].rsplit("} ", 1)[0])),
             float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith(name + "{")]


def run_scraped(tmp, model, extra, names, timeout, **variables):
    """The run under attnscope with every rank's per-layer series (ATTNSCOPE_METRICS_LAYERS=1): each
    rank's endpoint is read after the steps, while the script waits for it, until every layer has
    its forward and backward calls of all steps there. (exit code, stderr, {rank: last /metrics
    text})."""
    port, read = free_ports(2), os.path.join(tmp, "metrics-read")
    args = launch_args(tmp, model, 2, port, list(extra) + ["--wait-metrics-s", "300", "--metrics-read", read])
    texts, done = {}, set()
    with open(os.path.join(tmp, "job.log"), "w+") as log:
        job = subprocess.Popen(args, env=env(ATTNSCOPE_METRICS_LAYERS="1", **variables), stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and job.poll() is None and len(done) < 2:
                if all(os.path.exists(os.path.join(tmp, f"own-{r}.json")) for r in (0, 1)):
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
        check({n for n, _ in got} == set(names), f"{label} rank {rank}: /metrics layers {sorted(got)}, "
                                               f"expected {names}")
        for name in names:
            for phase in ("forward", "backward"):
                want = kinds[phase] | {"compiled_kernels"}
                have = got.get((name, phase), set())
                check(want <= have and "other" not in have,
                      f"{label} rank {rank}: /metrics {name} {phase} kinds {sorted(have)}, expected {sorted(want)}")
        calls = {(l.get("layer"), l.get("phase")): v for l, v in series(text, "attnscope_attention_seconds_count")}
        # A compiled layer's backward is a call between the backward graph's markers, counted at its
        # exit like the forward (an eager layer's backward folds when its step ends).
        want = {(n, p): float(STEPS) for n in names for p in ("forward", "backward")}
        check(calls == want, f"{label} rank {rank}: /metrics calls {calls}, expected {want}")
        compiles, seconds = metric(text, "attnscope_compiles_total"), metric(text, "attnscope_compile_seconds_total")
        d = sums[rank]["discovery"]
        check(compiles == d["compiles"] and seconds is not None and abs(seconds - d["compile_seconds"]) <= 0.01 *
              d["compile_seconds"], f"{label} rank {rank}: /metrics compiles {compiles} ({seconds} s), summary "
                                    f"{d['compiles']} ({d['compile_seconds']} s)")
    print(f"{label}: both ranks' /metrics have {names} forward and backward with kinds "
          f"{sorted(kinds['forward'] | {'compiled_kernels'})}, the calls and the compilations")


def compiled_run(tmp, model, how, fsdp=False, scrape_names=None, **variables):
    """The same compiled training with and without attnscope (2 ranks): (summaries, own outputs
    with attnscope, own outputs without, the ranks' /metrics texts when scrape_names names the
    layers to wait for)."""
    extra = ["--compile", how] + (["--fsdp"] if fsdp else [])
    plain = os.path.join(tmp, "plain")
    os.makedirs(plain)
    p = subprocess.run([os.path.join(SOURCE, "launch", "torchrun"), "--nproc_per_node", "2", "--master_port",
                        str(free_ports(2)), MODELS, model, "--steps", str(STEPS), "--out",
                        os.path.join(plain, "own-{rank}.json")] + extra, env=env(), capture_output=True, text=True,
                       timeout=900)
    check(p.returncode == 0, f"{model} compiled ({how}) without attnscope: exit {p.returncode}: {p.stderr[-3000:]}")
    texts = None
    if scrape_names:
        code, err, texts = run_scraped(tmp, model, extra, scrape_names, 900, **variables)
    else:
        code, err = run(tmp, model, 2, extra=extra, timeout=900, **variables)
    check(code == 0, f"{model} compiled ({how}) under attnscope: exit {code}: {err[-3000:]}")
    check("global hooks" not in err, f"torch.compile warned about attnscope's hook: {err[-2000:]}")
    return (summaries(tmp, 2), [load(os.path.join(tmp, f"own-{r}.json")) for r in range(2)],
            [load(os.path.join(plain, f"own-{r}.json")) for r in range(2)], texts)


def check_compiled(tmp, model, how, kinds, fsdp=False, phases=("forward", "backward"), rule="class_name",
                   metrics=False, **variables):
    """Per layer inside compiled code: the eager names, forward and backward calls equal to the
    steps, the kinds of the ops compiled code calls plus compiled_kernels, compilation apart; and
    nothing added to the job: the same graph breaks and graphs as without attnscope, the same losses."""
    names = {"gpt_ckpt_wrapper": EXPECTED["gpt_manual"][0], "mixer": [f"mixers.{i}" for i in range(2)]}.get(
        model) or EXPECTED[model][0]
    sums, own, base, texts = compiled_run(tmp, model, how, fsdp, names if metrics else None, **variables)
    label = f"{model} compiled ({how}{', FSDP2' if fsdp else ', DDP'})"
    if metrics:
        check_compiled_metrics(texts, sums, names, kinds, label)
    for rank, s in enumerate(sums):
        check(own[rank]["graph_breaks"] == base[rank]["graph_breaks"] == 0,
              f"{label} rank {rank}: graph breaks {own[rank]['graph_breaks']} under attnscope, "
              f"{base[rank]['graph_breaks']} without")
        check(own[rank]["graphs"] == base[rank]["graphs"],
              f"{label} rank {rank}: {own[rank]['graphs']} graphs under attnscope, {base[rank]['graphs']} without")
        # The markers copy tensors and bound the layer's kernels: the compiler's float reductions
        # may group differently at a layer's edges, so equal to within float32 rounding of the loss.
        for mine, theirs in zip(own[rank]["losses"], base[rank]["losses"]):
            check(abs(mine - theirs) <= 1e-5 * abs(theirs),
                  f"{label} rank {rank}: losses {own[rank]['losses']} vs {base[rank]['losses']} without attnscope")
        got = [l["name"] for l in s["layers"]]
        check(got == names, f"{label} rank {rank}: layers {got}, expected {names}")
        origins = {o["name"]: o for o in s["discovery"]["layers"]}
        check(sorted(origins) == sorted(names) and all(o["rule"] == rule and "compiled code" in o["source"]
                                                       for o in origins.values()),
              f"{label} rank {rank}: discovery {origins}")
        compile_s = s["discovery"]["compile_seconds"]
        check(s["discovery"]["compiles"] >= 1 and compile_s > 0,
              f"{label} rank {rank}: compilation not reported: {s['discovery']}")
        for layer in s["layers"]:
            check(set(layer["phases"]) == set(phases),
                  f"{label} rank {rank} {layer['name']}: phases {sorted(layer['phases'])}, expected {sorted(phases)}")
            for phase in phases:
                p = layer["phases"].get(phase)
                check(p is not None and p["calls"] == STEPS,
                      f"{label} rank {rank} {layer['name']}: {phase} {None if p is None else p['calls']} calls, "
                      f"expected {STEPS}; phases {sorted(layer['phases'])}")
                # Compilation is never a call: the slowest call is far below the compile time.
                check(p["call"]["max_seconds"] < compile_s / 10,
                      f"{label} rank {rank} {layer['name']}: {phase} max {p['call']['max_seconds']} s, "
                      f"compile {compile_s} s")
                want = kinds["forward" if phase == "recompute" else phase] | {"compiled_kernels"}
                check(want <= set(p["op_kinds"]),
                      f"{label} rank {rank} {layer['name']}: {phase} kinds {sorted(p['op_kinds'])} lack "
                      f"{sorted(want - set(p['op_kinds']))}")
                check("other" not in p["op_kinds"],
                      f"{label} rank {rank} {layer['name']}: {phase} has 'other': {p['op_kinds'].get('other')}")
        print(f"{label} rank {rank}: {got} forward and backward {STEPS} calls each, kinds "
              f"{sorted(s['layers'][0]['phases']['forward']['op_kinds'])} / "
              f"{sorted(s['layers'][0]['phases']['backward']['op_kinds'])}; graph breaks 0 both ways, "
              f"{own[rank]['graphs']} graphs both ways, losses equal; compile {compile_s:.1f} s apart")


SDPA_KINDS = {"forward": {"qkv_projection", "fused_attention", "output_projection"},
              "backward": {"qkv_projection", "fused_attention", "output_projection"}}


def check_compiled_trace(tmp, names, kinds, label):
    """The compiled layers in the run's traces as attnscope-analyze reads them: the eager names,
    one forward call per layer and step, forward and backward with the kinds compiled code calls
    plus compiled_kernels (the same run's traces: no second compilation)."""
    analyze = os.path.join(BUILD, "analysis", "attnscope-analyze")
    report, layers = os.path.join(tmp, "report.json"), os.path.join(tmp, "layers.json")
    p = subprocess.run([analyze, os.path.join(tmp, "traces"), "--quiet", "--json", report, "--layers", layers],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"{label}: attnscope-analyze exit {p.returncode}: {p.stderr[-2000:]}")
    described, rows = load(layers), load(report)["layers"]
    got = [l["layer"] for l in described["layers"]]
    check(sorted(got) == sorted(names), f"{label}: the trace's layers {got}, expected {names}")
    check(described["ranks"] == 2 and described["sampled_steps"] > 0,
          f"{label}: trace of {described['ranks']} ranks, {described['sampled_steps']} sampled steps")
    for layer in described["layers"]:
        check(layer["calls_per_step"] == 1,
              f"{label}: {layer['layer']} {layer['calls_per_step']} calls per step in the trace, expected 1")
        per_step = layer["seconds_per_step"]
        for phase in ("forward", "backward"):
            want = kinds[phase] | {"compiled_kernels"}
            check(phase in per_step and want <= set(per_step[phase]),
                  f"{label}: {layer['layer']} {phase} in the trace: {per_step.get(phase)}, lacks "
                  f"{sorted(want - set(per_step.get(phase, {})))}")
    calls = {(r["layer"], r["phase"]): r["calls"] for r in rows}
    want = {(n, ph): 2 * STEPS for n in names for ph in ("forward", "backward")}  # every step sampled, 2 ranks
    check(calls == want, f"{label}: calls in the report {calls}, expected {want}")
    print(f"{label}: the trace has {sorted(got)}, 1 call per step, forward and backward with compiled_kernels; "
          f"report calls {sorted(calls.items())}")


def case_compile(tmp):
    # nanoGPT's recipe on Llama: torch.compile(model), then DDP (DDPOptimizer splits the graph at
    # bucket boundaries). The same run's traces show the compiled layers to attnscope-analyze.
    # Its ranks' endpoints serve the compiled layers' series (the same run, read after its steps).
    check_compiled(tmp, "llama_sdpa", "model", SDPA_KINDS, metrics=True)
    check_compiled_trace(tmp, EXPECTED["llama_sdpa"][0], SDPA_KINDS, "llama_sdpa compiled (model, DDP)")


# Unfused attention in compiled code: the softmax, masking and dropout are generated kernels, the
# matmuls extern. (Training SDPA with dropout compiles to the same: Inductor decomposes it.)
UNFUSED_KINDS = {"forward": {"qkv_projection", "score_matmul", "context_matmul", "output_projection"},
                 "backward": {"qkv_projection", "score_matmul", "context_matmul", "output_projection"}}


def case_compile_gpt(tmp):
    # The hand-written GPT (q @ k^T, masked softmax, @ v) under whole-model compile and DDP.
    check_compiled(tmp, "gpt_manual", "model", UNFUSED_KINDS)


def case_compile_checkpointing(tmp):
    # checkpoint_wrapper around every block of the GPT, the whole model compiled, DDP: AOTAutograd's
    # partitioner recomputes each checkpointed block, its markers with it, inside the backward graph.
    check_compiled(tmp, "gpt_ckpt_wrapper", "model", UNFUSED_KINDS, phases=("forward", "recompute", "backward"))


def case_compile_include(tmp):
    # Attention in a module whose class name does not say so, named by ATTNSCOPE_ATTENTION_MODULES,
    # inside a compiled model.
    check_compiled(tmp, "mixer", "model", UNFUSED_KINDS, rule="include", ATTNSCOPE_ATTENTION_MODULES="^Mixer$")


def case_compile_blocks_fsdp(tmp):
    # The TorchTitan recipe: each decoder block torch.compile'd, then fully_shard per block and at
    # the root (the blocks' class becomes FSDPOptimizedModule).
    check_compiled(tmp, "llama_sdpa", "blocks", SDPA_KINDS, fsdp=True)


def case_compile_method(tmp):
    # model.compile() (in place, no wrapper module), then DDP. The GPT's SDPA with dropout in training
    # is decomposed by Inductor into the unfused recipe.
    check_compiled(tmp, "gpt_sdpa", "method", UNFUSED_KINDS)


OTHER_CASES = ("checkpointing", "nothing_found", "steering", "compile", "compile_gpt", "compile_checkpointing",
               "compile_include", "compile_blocks_fsdp", "compile_method", "fsdp", "prometheus")


def main():
    with tempfile.TemporaryDirectory(prefix=f"attnscope-discovery-{CASE}-") as tmp:
        if CASE in EXPECTED:
            names, rule, kinds = EXPECTED[CASE]
            phases = ("forward",) if CASE == "mha_eval" else ("forward", "backward")
            check_model(tmp, CASE, names, rule, kinds, phases)
        elif CASE in OTHER_CASES:
            globals()[f"case_{CASE}"](tmp)
        else:
            sys.exit(f"unknown case {CASE!r}; allowed: {', '.join(list(EXPECTED) + list(OTHER_CASES))}")


if __name__ == "__main__":
    main()
