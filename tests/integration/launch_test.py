#!/usr/bin/env python3
"""launch/attnscope-run end to end: real torchrun launches of the C++ and the Python example, zero-code
attach of an unmodified script, the Python API, and the launcher's errors.
Run by ctest: pytest launch_test.py::test_<case> --build-dir BUILD_DIR --source-dir SOURCE_DIR

Cases:
  cpp2        --no_python build/examples/train_transformer, 2 ranks: summaries, cluster, file_sd
  python2     examples/train_transformer.py (DDP over Gloo, no attnscope in it), 2 ranks: every
              encoder layer's self-attention observed per module name, forward and backward, every
              step counted without step() calls; ATTNSCOPE_AGGREGATION=GLOO forms the Gloo side group
  python_api  the attnscope module used directly: start/attention/step/summary/stop, errors
  errors      wrong flags, a missing script, bad configuration, a failing job's exit status
"""
import os
import subprocess
import sys

import pytest

from ranks import free_ports, load_json, run_env

PY = sys.executable  # ATTNSCOPE_PYTHON: the Python whose torch attnscope was built against


class Launcher:
    """launch/attnscope-run of the source tree, its workers importing attnscope from the build."""

    def __init__(self, build, source):
        self.build = build
        self.run_path = os.path.join(source, "launch", "attnscope-run")

    def env(self, **variables):
        return run_env(self.build, **variables)

    def __call__(self, args, timeout=240, **variables):
        p = subprocess.run([self.run_path] + args, env=self.env(**variables), capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr


@pytest.fixture
def launch(build_dir, source_dir):
    return Launcher(build_dir, source_dir)


def test_cpp2(run_dir, launch, build_dir):
    code, out, err = launch(["--run-dir", run_dir, "--interval", "1", "--port", str(free_ports(2)),
                             "--nproc_per_node", "2", "--master_port", str(free_ports(2)),
                             "--no_python", os.path.join(build_dir, "examples", "train_transformer"),
                             "--layers", "2", "--d-model", "32", "--heads", "4", "--seq", "16", "--batch", "4",
                             "--threads", "1", "--steps", "60", "--quiet"])
    assert code == 0, f"exit {code}: {err[-3000:]}"
    assert f"run directory {run_dir}" in err and "metrics   http://127.0.0.1:" in err, f"where things are not printed: {err[:800]}"
    for rank in (0, 1):
        s = load_json(os.path.join(run_dir, f"summary-{rank}.json"))
        assert s["run"]["rank"] == rank and s["run"]["world_size"] == 2, f"rank {rank}: {s['run']}"
        assert [l["name"] for l in s["layers"]] == ["layers.0.attn", "layers.1.attn"], f"rank {rank} layers"
    cluster = load_json(os.path.join(run_dir, "summary-0.json"))["cluster"]
    # A C++ program that hands in only its store aggregates through it (no Gloo headers in the wheel).
    assert cluster["aggregation"] == "store" and cluster["rounds"] > 0, f"cluster: {str(cluster)[:300]}"
    targets = load_json(os.path.join(run_dir, "targets.json"))
    assert sorted(t["labels"]["rank"] for t in targets) == ["0", "1"], f"targets: {targets}"
    print("C++ example under attnscope-run: 2 summaries, cluster through the store, 2 targets")


def test_python2(run_dir, launch, source_dir):
    steps = 12
    code, out, err = launch(["--run-dir", run_dir, "--interval", "1", "--port", str(free_ports(2)),
                             "--nproc_per_node", "2", "--master_port", str(free_ports(2)),
                             os.path.join(source_dir, "examples", "train_transformer.py"), "--steps", str(steps),
                             "--layers", "3", "--slow-rank", "1", "--slow-factor", "3", "--slow-layer", "2"],
                            ATTNSCOPE_AGGREGATION="GLOO")  # parsed as libattnscope parses it: gloo
    assert code == 0, f"exit {code}: {err[-3000:]}"
    expected = [f"encoder.layers.{i}.self_attn" for i in range(3)]
    for rank in (0, 1):
        s = load_json(os.path.join(run_dir, f"summary-{rank}.json"))
        assert s["run"]["world_size"] == 2 and s["run"]["rank"] == rank, f"rank {rank}: {s['run']}"
        # No step() calls: each backward pass is a step, the last one ended at stop().
        assert s["run"]["steps_seen"] == steps and s["run"]["step_source"] == "backward_passes", (
               f"rank {rank}: {s['run']['steps_seen']} steps seen ({s['run']['step_source']}), {steps} trained")
        names = [l["name"] for l in s["layers"]]
        assert names == expected, f"rank {rank} layers {names}, expected {expected}"
        for layer in s["layers"]:
            fwd, bwd = layer["phases"]["forward"], layer["phases"].get("backward")
            # The slowed layer runs its attention 3 times inside one module call: one call, 3x the work.
            calls = steps
            assert fwd["calls"] == calls, f"rank {rank} {layer['name']}: {fwd['calls']} forward calls, expected {calls}"
            assert bwd is not None and bwd["calls"] >= steps, f"rank {rank} {layer['name']}: backward {bwd}"
            # PyTorch 2.x's nn.MultiheadAttention runs SDPA between its projections; with the
            # example's dropout in training that is SDPA's math path, named as the backend.
            kinds = set(fwd["op_kinds"])
            assert {"qkv_projection", "fused_attention", "output_projection"} <= kinds, (
                   f"rank {rank} {layer['name']}: forward op kinds {sorted(kinds)}")
            kernels = calls * (3 if rank == 1 and layer["name"].endswith("2.self_attn") else 1)
            assert fwd.get("attention_backends") == {"math": kernels}, (
                   f"rank {rank} {layer['name']}: backends {fwd.get('attention_backends')}")
            assert "fused_attention" in bwd["op_kinds"], f"rank {rank} {layer['name']}: backward {sorted(bwd['op_kinds'])}"
    cluster = load_json(os.path.join(run_dir, "summary-0.json"))["cluster"]
    assert cluster["aggregation"] == "gloo", f"aggregation {cluster['aggregation']}"
    print(f"unmodified DDP script: {len(expected)} layers per rank observed by module name, forward and backward;"
          f" {steps} steps seen; ATTNSCOPE_AGGREGATION=GLOO aggregates over Gloo")


def test_python_api(run_dir, launch, build_dir):
    script = os.path.join(run_dir, "api.py")
    with open(script, "w") as f:
        f.write('''
import json, os, sys, torch
import attnscope
try:
    attnscope.start(sample_every=0)
    sys.exit("no error for sample_every=0")
except ValueError as e:
    assert str(e) == 'ATTNSCOPE_SAMPLE_EVERY="0" is out of range; allowed: an integer from 1 to 1000000', str(e)
try:
    attnscope.start(sampel_every=2)
    sys.exit("no error for an unknown option")
except ValueError as e:
    assert "unknown option 'sampel_every'" in str(e) and "sample_every" in str(e), str(e)
assert not attnscope.is_running()
attnscope.start(summary_json=sys.argv[1], port=0, log_level="warn")
assert attnscope.is_running()
mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
x = torch.randn(2, 8, 32)
for _ in range(5):
    with attnscope.attention("block.attn") as scope:
        assert scope.name == "block.attn"
        out, _ = mha(x, x, x)
    out.sum().backward()
    attnscope.step()
s = attnscope.summary()
layer = s["layers"][0]
assert layer["name"] == "block.attn", layer["name"]
assert layer["phases"]["forward"]["calls"] == 5, layer["phases"]["forward"]["calls"]
assert layer["phases"]["backward"]["calls"] == 5, layer["phases"]["backward"]
assert s["run"]["steps_seen"] == 5, s["run"]
attnscope.stop()
assert not attnscope.is_running()
assert json.load(open(sys.argv[1]))["layers"][0]["name"] == "block.attn"
print("python api ok", attnscope.version())
''')
    e = launch.env()
    e["PYTHONPATH"] = os.path.join(build_dir, "python")
    p = subprocess.run([PY, script, os.path.join(run_dir, "s.json")], env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}: {p.stdout} {p.stderr[-2000:]}"
    print(p.stdout.strip())


def test_errors(run_dir, launch, source_dir):
    code, out, err = launch(["--nproc_per_node"])
    assert code == 2 and "expected one argument" in err, f"missing value: {code} {err[-500:]}"
    code, out, err = launch(["--nproc_per_node", "2", "--bogus-flag", "x.py"])
    assert code == 2 and "unrecognized arguments: --bogus-flag" in err, f"unknown flag: {code} {err[-500:]}"
    code, out, err = launch(["--nproc_per_node", "2", os.path.join(run_dir, "missing.py")])
    assert code == 2 and "missing.py' does not exist" in err, f"missing script: {code} {err[-500:]}"
    code, out, err = launch(["--nproc_per_node", "1", "--no_python", os.path.join(run_dir, "nope")])
    assert code == 2 and "is not an executable file or command" in err, f"missing binary: {code} {err[-500:]}"
    code, out, err = launch(["--sample-every", "0", "--nproc_per_node", "1", os.path.join(source_dir, "examples", "train_transformer.py")])
    assert code == 2 and 'ATTNSCOPE_SAMPLE_EVERY="0" is out of range; allowed: an integer from 1 to 1000000' in err, (
           f"bad configuration: {code} {err[-500:]}")
    code, out, err = launch(["--help"])
    assert code == 0 and "--sample-every" in out and "--no_python" in out, "help"
    failing = os.path.join(run_dir, "fail.py")
    with open(failing, "w") as f:
        f.write("import sys\nsys.exit(3)\n")
    code, out, err = launch(["--run-dir", run_dir, "--port", "0", "--nproc_per_node", "1", "--master_port", str(free_ports(2)), failing])
    assert code == 3, f"a worker exiting with 3 gave {code}: {err[-800:]}"
    print("errors: missing value, unknown flag, missing script and binary, bad configuration; exit status 3 passed on")


