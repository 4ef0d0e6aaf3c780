#!/usr/bin/env python3
"""Prometheus export end to end: real ranks, a real Prometheus server, a real push gateway.
Run by ctest: pytest prometheus_test.py::test_<case> --example EXAMPLE_BINARY --source-dir SOURCE_DIR
--analyze ANALYZE_BINARY

Cases:
  scrape4_straggler  4 ranks under torchrun (launch/torchrun), rank 2 slowed in layer 1; Prometheus
                     scrapes them through the file_sd file rank 0 writes: every endpoint is clean
                     for `promtool check metrics`, series of every rank arrive, rank 2's straggler
                     score is the highest and above the threshold, rank 0's job summary names
                     layers.1.attn behind it, no rank serves per-layer series by default while the
                     job histograms are well formed, every query of launch/grafana/attnscope.json
                     (but the alert list's) returns data, /control layers=on on rank 2's endpoint
                     brings its per-layer series (layer 1 the slowest) and layers=off takes them
                     away, a /control request to rank 0 changes the sample rate of all 4 ranks, and
                     the job's roofline in Prometheus (intensity and bound per layer, phase and op
                     kind) is the one attnscope-analyze reports from the ranks' traces
  series_by_depth    the same 2-rank job at 2 and 24 layers: rank 1 serves the same number of
                     series, none with a layer label; rank 0's job summary grows per layer only
  auth_push_control  1 rank whose port is taken (falls back to a free one), with basic auth, a push
                     gateway and runtime control: unauthenticated scrapes get 401, the fallback is
                     exported, /control changes the sample rate, the last push has the final step
  idle_clients       1 training rank (the example: LibTorch loaded) whose endpoint runs its
                     libmicrohttpd threads (counted in /proc); 100 idle connections (reopened as the server closes
                     them) and a POST body trickled a byte a second stay open while Prometheus
                     scrapes every second with a 1 s timeout: `up` stays 1 and every scrape is
                     faster than the timeout over the whole window, and the server closes the idle
                     and trickling connections after its connection timeout (read from the rank's
                     log), within a margin
"""
import base64
import json
import os
import re
import selectors
import socket
import subprocess
import threading
import time

from prometheus_server import dashboard_queries, http_get, start_example_job, wait_for
from ranks import TINY, free_ports

THRESHOLD = 1.2


def promtool_clean(text, where):
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (
           f"promtool check metrics on {where}: exit {p.returncode}: {p.stdout[:1000]} {p.stderr[:1000]}")


def test_scrape4_straggler(run_dir, example, source_dir, analyze_bin, prometheus):
    targets = os.path.join(run_dir, "targets.json")
    prom = prometheus(targets)
    job, metrics_port = start_example_job(
        run_dir, example, source_dir, targets, 4, "scrape-test",
        ["--duration-s", "75", "--slow-rank", "2", "--slow-factor", "4", "--slow-layer", "1"],
        ATTNSCOPE_CONTROL_TOKEN="scrape-test-control-token", ATTNSCOPE_TRACE_DIR=os.path.join(run_dir, "trace"))
    try:
        listed = wait_for("the file_sd file", lambda: json.load(open(targets)), 40)
        assert len(listed) == 4, f"file_sd lists {len(listed)} targets, not 4: {listed}"
        ranks = sorted(int(g["labels"]["rank"]) for g in listed)
        assert ranks == [0, 1, 2, 3], f"file_sd ranks {ranks}"
        for g in listed:
            status, text = http_get(f"http://{g['targets'][0]}/metrics")
            assert status == 200, f"GET {g['targets'][0]}/metrics: {status}"
            assert f'rank="{g["labels"]["rank"]}"' in text, f"{g['targets'][0]} does not name its rank"
            promtool_clean(text, g["targets"][0])
        print("file_sd: 4 targets, each endpoint clean for promtool")

        def straggler_seen():
            result = prom.query("attnscope_straggler_score")
            scores = {int(r["metric"]["rank"]): float(r["value"][1]) for r in result}
            return scores if len(scores) == 4 and max(scores, key=scores.get) == 2 and scores[2] > THRESHOLD else None
        scores = wait_for("rank 2's straggler score above the threshold in Prometheus", straggler_seen, 45)
        print("attnscope_straggler_score per rank:", {r: round(s, 2) for r, s in sorted(scores.items())})
        # Flagged once the score stayed above the threshold for ATTNSCOPE_STRAGGLER_WINDOWS (3) rounds.
        flagged = wait_for("rank 2 flagged as a straggler", lambda: {
            r["metric"]["rank"] for r in prom.query("attnscope_straggler == 1")}, 20)
        assert flagged == {"2"}, f"ranks flagged as stragglers: {flagged}"

        # While the job runs (the series are fresh): every dashboard query returns data.
        failures = []
        n = 0
        for title, q in dashboard_queries(source_dir, "scrape-test"):
            # The alert list reads ALERTS, which has data only where launch/prometheus's rules are
            # loaded and one of them fires; this test's Prometheus loads no rules (alerts_test.py's
            # does, and checks that query).
            if q.startswith("ALERTS{"):
                continue
            try:  # rates need two scrapes inside their window: give a young series time
                wait_for(f"data for {q}", lambda: prom.query(q), 20)
            except AssertionError:
                failures.append(f"{title}: {q} (samples of the job: "
                                f"{prom.query('count_over_time(attnscope_steps_total[30s])')})")
            n += 1
        assert not failures, "dashboard queries without data:\n" + "\n".join(failures)
        print(f"all {n} dashboard queries return data")

        all_ranks = {"0", "1", "2", "3"}
        wait_for("attnscope_steps_total from every rank", lambda: {
            r["metric"]["rank"] for r in prom.query('attnscope_steps_total{job="scrape-test"}')} == all_ranks, 20)
        up = prom.query('max_over_time(up{job="scrape-test"}[30s])')
        assert {r["metric"]["rank"] for r in up if r["value"][1] == "1"} == all_ranks, f"up: {up}"
        # The default shape: no rank serves per-layer series; rank 0's job summary has every layer.
        assert not prom.query('{job="scrape-test", layer!="", __name__=~"attnscope_attention_.*"}'), (
               "ranks serve per-layer attention series by default")
        # Job histograms: +Inf bucket equals _count, and buckets never decrease.
        diff = prom.query('max(abs(attnscope_job_attention_seconds_bucket{le="+Inf"} - ignoring(le) '
                          'attnscope_job_attention_seconds_count))')
        assert diff and float(diff[0]["value"][1]) == 0, f"+Inf bucket differs from _count: {diff}"
        series = prom.query('attnscope_job_attention_seconds_bucket{layer="layers.1.attn", phase="forward"}')
        assert len(series) == 38, f"{len(series)} buckets for one histogram, expected 37 bounds + Inf"
        counts = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in series)
        assert all(a[1] <= b[1] for a, b in zip(counts, counts[1:])), f"buckets decrease: {counts}"
        assert counts[-1][1] > 0, "no calls counted"
        # Each rank's call times by phase: a summary with the window's p50 and p99.
        quantiles = {(r["metric"]["rank"], r["metric"]["phase"], r["metric"]["quantile"])
                     for r in prom.query('attnscope_attention_call_seconds{job="scrape-test"}')}
        assert {(r, p, q) for r in all_ranks for p in ("forward", "backward") for q in ("0.5", "0.99")} <= quantiles, (
               f"call-time quantiles in Prometheus: {sorted(quantiles)}")
        # The slow rank runs layer 1's attention 4 times per step: the detector names that layer
        # behind the straggler, in rank 0's job summary.
        named = wait_for("the straggler's attribution", lambda: {
            (r["metric"]["rank"], r["metric"]["layer"]) for r in prom.query(
                'attnscope_straggler_attribution_share{job="scrape-test"}')}, 20)
        assert named == {("2", "layers.1.attn")}, f"attribution: {named}"
        print("attnscope_straggler_attribution_share names", sorted(named))
        # Per-layer detail for one rank at runtime: /control layers=on on rank 2's own endpoint.
        bearer = {"Authorization": "Bearer scrape-test-control-token"}
        status, body = http_get(f"http://127.0.0.1:{metrics_port + 2}/control", bearer, data=b"layers=on",
                                method="POST")
        assert status == 200 and '"layers": true' in body, f"layers=on on rank 2: {status} {body}"
        detail = wait_for("rank 2's per-layer histogram", lambda: prom.query(
            'attnscope_attention_seconds_bucket{job="scrape-test", rank="2", layer="layers.1.attn", phase="forward"}'), 20)
        assert len(detail) == 38, f"rank 2's layers.1.attn histogram has {len(detail)} buckets"
        detailed = {r["metric"]["rank"] for r in prom.query(
            'attnscope_attention_seconds_count{job="scrape-test"}')}
        assert detailed == {"2"}, f"ranks serving per-layer series: {detailed}"
        # The slow rank's layer 1 time per step against its other layers: 4 calls a step.
        per_layer = {r["metric"]["layer"]: float(r["value"][1]) for r in prom.query(
            'attnscope_attention_seconds_sum{job="scrape-test", rank="2", phase="forward"}')}
        assert max(per_layer, key=per_layer.get) == "layers.1.attn", f"rank 2 forward seconds per layer: {per_layer}"
        series_on = float(prom.query('attnscope_metrics_series{job="scrape-test", rank="2"}')[0]["value"][1])
        status, body = http_get(f"http://127.0.0.1:{metrics_port + 2}/control", bearer, data=b"layers=off",
                                method="POST")
        assert status == 200 and '"layers": false' in body, f"layers=off on rank 2: {status} {body}"
        series_off = wait_for("rank 2 back to its totals", lambda: (lambda v: v if v and v < series_on else None)(
            float((prom.query('attnscope_metrics_series{job="scrape-test", rank="2"}') or [{"value": [0, "0"]}])[0]
                  ["value"][1])), 20)
        print(f"/control layers=on on rank 2: {series_on:.0f} series on its endpoint, {series_off:.0f} after "
              f"layers=off; layers.1.attn forward seconds the highest of its layers")

        # Runtime control: one request to rank 0, applied by every rank at the next round.
        status, body = http_get(f"http://127.0.0.1:{metrics_port}/control",
                                {"Authorization": "Bearer scrape-test-control-token"}, data=b"sample_every=3",
                                method="POST")
        assert status == 200, f"control request: {status} {body}"
        wait_for("attnscope_sample_every 3 on all 4 ranks", lambda: {
            r["metric"]["rank"] for r in prom.query('attnscope_sample_every{job="scrape-test"} == 3')} == all_ranks, 30)
        print("control: sample_every=3 sent to rank 0, in force on all 4 ranks")

        # The roofline as Prometheus holds it: rank 0's job summary per (layer, phase, op kind),
        # flops, bytes and bound against rank 0's ceilings; every rank's ceilings.
        def roofline_series():
            cells = {}
            for name, field in (("attnscope_job_roofline_flops_total", "flops"),
                                ("attnscope_job_roofline_bytes_total", "bytes")):
                for r in prom.query(f'{name}{{job="scrape-test"}}'):
                    m = r["metric"]
                    cells.setdefault((m["layer"], m["phase"], m["op_kind"]), {})[field] = float(r["value"][1])
            for r in prom.query('attnscope_job_roofline_bound{job="scrape-test"} == 1'):
                m = r["metric"]
                cells.setdefault((m["layer"], m["phase"], m["op_kind"]), {})["bound"] = m["bound"]
            ridge = {r["metric"]["rank"]: float(r["value"][1]) for r in prom.query(
                'attnscope_roofline_peak_flops_per_second{job="scrape-test"} / ignoring(source) '
                'attnscope_roofline_peak_bytes_per_second{job="scrape-test"}')}
            return (cells, ridge) if cells and set(ridge) == all_ranks else None
        scraped, ridge = wait_for("roofline series of the job and every rank's ceilings", roofline_series, 20)
    finally:
        code = job.wait(timeout=120)
    assert code == 0, f"torchrun exit {code}; see {run_dir}/job.log"

    # The post-run report, from the trace files the same ranks wrote: the same ceilings per rank, the
    # same op kinds, the same arithmetic intensity (flops/bytes: shapes do not change over the run,
    # so it does not depend on which windows each side saw), and the same bound for every rank and
    # cell (the report's intensity against the rank's ceilings as its trace recorded them).
    report = os.path.join(run_dir, "report.json")
    p = subprocess.run([analyze_bin, os.path.join(run_dir, "trace"), "--json", report], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"attnscope-analyze exit {p.returncode}: {p.stderr[-1500:]}"
    roof = json.load(open(report))["roofline"]
    points = {(pt["layer"], pt["phase"], pt["kind"]): pt for pt in roof["points"]}
    report_ridge = {str(h["rank"]): h["peak_flops_per_second"] / h["peak_bytes_per_second"] for h in roof["hardware"]}
    for rank in all_ranks:
        assert abs(report_ridge[rank] / ridge[rank] - 1) < 1e-6, (
               f"rank {rank}: ridge {ridge[rank]} in Prometheus, {report_ridge[rank]} in the report")
    compared = bounds = 0
    for (layer, phase, kind), c in sorted(scraped.items()):
        if c.get("bytes", 0) <= 0:
            continue
        pt = points.get((layer, phase, kind))
        assert pt is not None, f"{layer} {phase} {kind} is in Prometheus, not in the report"
        intensity = c["flops"] / c["bytes"]
        assert abs(intensity - pt["intensity"]) <= 1e-4 * max(1.0, intensity), (
               f"{layer} {phase} {kind}: intensity {intensity} in Prometheus, {pt['intensity']} in the report")
        compared += 1
        if "bound" in c and abs(pt["intensity"] / report_ridge["0"] - 1) > 1e-3:
            expected = "memory" if pt["intensity"] < report_ridge["0"] else "compute"
            assert c["bound"] == expected, (f"job {layer} {phase} {kind}: {c['bound']}-bound in Prometheus, "
                                           f"{expected}-bound from the report's intensity and rank 0's ceilings")
            bounds += 1
    kinds = {k[2] for k in scraped}
    assert {"qkv_projection", "score_matmul", "softmax", "context_matmul", "output_projection"} <= kinds, (
           f"op kinds in Prometheus: {sorted(kinds)}")
    assert compared >= 20 and bounds >= 20, f"only {compared} intensities and {bounds} bounds compared"
    assert roof["recommendations"], "the report makes no recommendation"
    print(f"roofline: {compared} (layer, phase, op kind) intensities and {bounds} bounds agree between "
          f"Prometheus' job summary and the report; recommendations: {[r['id'] for r in roof['recommendations']]}")


def series_of(port):
    """(series on the endpoint as Prometheus would store them, the sample lines) of one scrape."""
    status, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, f"GET :{port}/metrics: {status}"
    lines = [l for l in text.splitlines() if l and not l.startswith("#")]
    return len(lines), text


def test_series_by_depth(run_dir, example, source_dir):
    """The same 2-rank job at 2 and 24 layers: rank 1 serves the same series (no layer label),
    rank 0's job summary grows with the layers only (bounded by the model)."""
    counts = {}
    for layers in (2, 24):
        sub = os.path.join(run_dir, f"layers{layers}")
        os.makedirs(sub)
        targets = os.path.join(sub, "targets.json")
        args = ["--layers", str(layers), "--duration-s", "30"]
        job, port = start_example_job(sub, example, source_dir, targets, 2, "depth", args)
        try:
            # The sampled steps and both phases are in once the summary has forward and backward
            # quantiles and rank 0 has run rounds with both ranks.
            def settled():
                n1, text1 = series_of(port + 1)
                n0, text0 = series_of(port)
                ready = ('attnscope_attention_call_seconds_count{' in text1 and 'phase="backward"' in text1
                         and "attnscope_job_ranks_reporting" in text0 and re.search(
                             r'attnscope_job_ranks_reporting\{[^}]*\} 2', text0))
                return (n1, text1, n0) if ready else None
            n1, text1, n0 = wait_for(f"both ranks' figures at {layers} layers", settled, 60)
            promtool_clean(text1, f"rank 1 at {layers} layers")
        finally:
            job.terminate()
            job.wait(timeout=60)
        layered = [l for l in text1.splitlines() if 'layer="' in l and not l.startswith("#")]
        assert not layered, f"rank 1 at {layers} layers serves per-layer series: {layered[:3]}"
        counts[layers] = (n1, n0)
        print(f"{layers} layers: rank 1 serves {n1} series, rank 0 {n0}")
    assert counts[2][0] == counts[24][0], f"rank 1's series grew with the layers: {counts}"
    # Rank 0 adds per layer (forward and backward): the job histogram (40), op kinds, bytes, and the
    # job roofline cells: it grows with the model, by the same amount per layer.
    per_layer = (counts[24][1] - counts[2][1]) / 22
    assert 0 < per_layer < 300, f"rank 0 grows by {per_layer:.1f} series per layer: {counts}"
    print(f"rank 1: {counts[2][0]} series at 2 and 24 layers; rank 0 grows by {per_layer:.1f} series per layer")


def test_auth_push_control(run_dir, example):
    gateway_port = free_ports(1)
    gw_log = open(os.path.join(run_dir, "pushgateway.log"), "w")
    gw = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{gateway_port}"],
                          stdout=gw_log, stderr=subprocess.STDOUT)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    taken_port = taken.getsockname()[1]
    token = "t0k3n-for-the-control-test"
    summary = os.path.join(run_dir, "s-{rank}.json")
    env = dict(os.environ, ATTNSCOPE_INTERVAL_S="1", ATTNSCOPE_BIND="127.0.0.1", ATTNSCOPE_PORT=str(taken_port),
               ATTNSCOPE_METRICS_AUTH="prom:pa55word", ATTNSCOPE_PUSHGATEWAY=f"http://127.0.0.1:{gateway_port}",
               ATTNSCOPE_CONTROL_TOKEN=token, ATTNSCOPE_JOB="push-test", ATTNSCOPE_SUMMARY_JSON=summary,
               ATTNSCOPE_TRACE_DIR=os.path.join(run_dir, "traces"), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    err_path = os.path.join(run_dir, "job.err")
    job = subprocess.Popen([example] + TINY + ["--steps", "100000000", "--duration-s", "14"], env=env,
                           stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    try:
        wait_for("pushgateway", lambda: http_get(f"http://127.0.0.1:{gateway_port}/-/ready")[0] == 200, 30)
        line = wait_for("the fallback log line", lambda: re.search(
            r"metrics port 127\.0\.0\.1:(\d+) is not available .* serving /metrics on 127\.0\.0\.1:(\d+) instead",
            open(err_path).read()), 20)
        assert int(line.group(1)) == taken_port, f"fallback log names port {line.group(1)}, not {taken_port}"
        port = int(line.group(2))
        url = f"http://127.0.0.1:{port}/metrics"
        status, _ = http_get(url)
        assert status == 401, f"scrape without credentials: {status}, expected 401"
        status, _ = http_get(url, {"Authorization": "Basic " + base64.b64encode(b"prom:wrong").decode()})
        assert status == 401, f"scrape with a wrong password: {status}, expected 401"
        auth = {"Authorization": "Basic " + base64.b64encode(b"prom:pa55word").decode()}
        status, text = http_get(url, auth)
        assert status == 200, f"scrape with credentials: {status}"
        promtool_clean(text, url)
        assert re.search(r'attnscope_exporter_port_fallback\{[^}]*\} 1', text), "fallback not exported"
        assert re.search(r'attnscope_exporter_port\{[^}]*\} %d' % port, text), "served port not exported"
        print(f"port {taken_port} taken: served on {port}; 401 without or with wrong credentials, 200 with")

        control = f"http://127.0.0.1:{port}/control"
        status, _ = http_get(control, data=b"sample_every=4", method="POST")
        assert status == 401, f"control without the token: {status}"
        bearer = {"Authorization": "Bearer " + token}
        status, body = http_get(control, bearer, data=b"sample_every=lots", method="POST")
        assert status == 400 and "allowed" in body, f"bad control request: {status} {body}"
        status, body = http_get(control, bearer, data=b"sample_every=4", method="POST")
        assert status == 200, f"control request: {status} {body}"
        wait_for("attnscope_sample_every 4 after the next round", lambda: re.search(
            r'attnscope_sample_every\{[^}]*\} 4\n', http_get(url, auth)[1]), 10)
        print("control: sample_every=4 applied at the next round")
    finally:
        code = job.wait(timeout=90)
        taken.close()
    try:
        assert code == 0, f"example exit {code}: {open(err_path).read()[-2000:]}"
        with open(summary.replace("{rank}", "0")) as f:
            run = json.load(f)["run"]
        steps = run["steps_seen"]
        # The live sample rate has one owner: the summary and the trace show the rate /control set.
        assert run["sample_every"] == 4, f"summary's run.sample_every is {run['sample_every']}, /control set 4"
        import sqlite3
        db = sqlite3.connect(os.path.join(run_dir, "traces", "rank-0.sqlite"))
        (traced,), = db.execute("SELECT value FROM meta WHERE key = 'sample_every'").fetchall()
        db.close()
        assert traced == "4", f"trace's meta.sample_every is {traced}, /control set 4"
        print("summary and trace show sample_every 4 after the /control change")
        status, pushed = http_get(f"http://127.0.0.1:{gateway_port}/metrics")
        m = re.search(r'attnscope_steps_total\{[^}]*instance="[^"]*-rank0"[^}]*job="push-test"[^}]*\} (\S+)', pushed)
        assert m is not None, "no attnscope_steps_total for job push-test in the push gateway"
        assert int(float(m.group(1))) == steps, f"last push has step {m.group(1)}, the run ended at {steps}"
        print(f"push gateway holds the final step count ({steps})")
    finally:
        gw.terminate()
        gw.wait(timeout=30)


class IdleClients(threading.Thread):
    """Holds `n` connections to the endpoint that send nothing; one the server closes is opened
    again at once. Records how long each lasted (connect to close)."""

    def __init__(self, port, n):
        super().__init__(daemon=True)
        self.port, self.n = port, n
        self.lifetimes = []
        self.open = 0
        self.stop = threading.Event()
        self.sel = selectors.DefaultSelector()
        for _ in range(n):
            self._connect()

    def _connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ, time.monotonic())
        self.open += 1

    def run(self):
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    continue
                self.lifetimes.append(time.monotonic() - key.data)
                self.sel.unregister(key.fileobj)
                key.fileobj.close()
                self.open -= 1
                self._connect()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


class SlowBody(threading.Thread):
    """POSTs to /control a body whose Content-Length is 1000, a byte a second; when the server
    closes the connection, starts again. Records how long after its headers each was closed."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.lifetimes = []
        self.answers = []
        self.stop = threading.Event()
        self.started = threading.Event()

    def run(self):
        while not self.stop.is_set():
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(b"POST /control HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded"
                      b"\r\nContent-Length: 1000\r\n\r\n")
            start = time.monotonic()
            self.started.set()
            s.setblocking(False)
            sel = selectors.DefaultSelector()
            sel.register(s, selectors.EVENT_READ)
            closed = False
            while not closed and not self.stop.is_set():
                if sel.select(timeout=1.0):
                    try:
                        data = s.recv(4096)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self.answers.append(data)
                        continue
                    closed = True
                else:
                    try:
                        s.send(b"a")
                    except OSError:
                        closed = True
            if closed:
                self.lifetimes.append(time.monotonic() - start)
            sel.close()
            s.close()


def test_idle_clients(run_dir, example, prometheus):
    port = free_ports(1)
    env = dict(os.environ, ATTNSCOPE_INTERVAL_S="1", ATTNSCOPE_BIND="127.0.0.1", ATTNSCOPE_PORT=str(port),
               ATTNSCOPE_LOG_LEVEL="debug", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    err_path = os.path.join(run_dir, "job.err")
    job = subprocess.Popen([example] + TINY + ["--steps", "100000000", "--duration-s", "60"], env=env,
                           stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    prom = prometheus(static_target=f"127.0.0.1:{port}", interval="1s")
    scrape_timeout = 1.0
    idle = slow = None
    try:
        line = wait_for("the endpoint's start line in the rank's log", lambda: re.search(
            r"metrics endpoint on 127\.0\.0\.1:(\d+): (\d+) threads, up to (\d+) connections, "
            r"connection timeout (\d+) s", open(err_path).read()), 40)
        assert int(line.group(1)) == port, f"endpoint on port {line.group(1)}, not {port}"
        threads, limit, timeout = int(line.group(2)), int(line.group(3)), int(line.group(4))
        assert limit > 101, f"the connection limit {limit} leaves no room beside 101 stuck clients"
        # libmicrohttpd's threads run inside the training process, beside LibTorch and its BLAS.
        names = [open(f"/proc/{job.pid}/task/{t}/comm").read().strip() for t in os.listdir(f"/proc/{job.pid}/task")]
        workers = names.count("MHD-worker")
        maps = open(f"/proc/{job.pid}/maps").read()
        libs = sorted({os.path.basename(m) for m in re.findall(r"(/\S+\.so[.\d]*)$", maps, re.M)
                       if re.search(r"libtorch_cpu|blas|libgomp|libmicrohttpd", m)})
        print(f"process {job.pid}: {len(names)} threads, {workers} named MHD-worker; loaded: {', '.join(libs)}")
        assert workers == threads, f"{workers} MHD-worker threads in the training process, expected {threads}: {names}"
        assert any("libtorch_cpu" in lib for lib in libs), f"no LibTorch in the training process: {libs}"
        wait_for("Prometheus scraping the rank", lambda: [r for r in prom.query('up{job="attnscope"}')
                                                          if r["value"][1] == "1"], 30)

        idle = IdleClients(port, 100)
        idle.start()
        slow = SlowBody(port)
        slow.start()
        assert slow.started.wait(10), "the slow client could not connect"
        start = time.time()
        window = 4 * timeout  # every idle connection is closed and reopened several times over
        # The window's end: Prometheus has a sample from after it (no fixed sleep).
        wait_for("the window to pass", lambda: time.time() >= start + window, window + 5)
        end = time.time()
        wait_for("a scrape after the window", lambda: [r for r in prom.query('timestamp(up{job="attnscope"})')
                                                       if float(r["value"][1]) >= end], 10)
        held = idle.open
        idle.stop.set()
        slow.stop.set()
        rng = f"[{int(end - start)}s]"
        scrapes = prom.query(f'count_over_time(up{{job="attnscope"}}{rng})', at=end)
        up_min = prom.query(f'min_over_time(up{{job="attnscope"}}{rng})', at=end)
        slowest = prom.query(f'max_over_time(scrape_duration_seconds{{job="attnscope"}}{rng})', at=end)
        mean = prom.query(f'avg_over_time(scrape_duration_seconds{{job="attnscope"}}{rng})', at=end)
        n = int(scrapes[0]["value"][1]) if scrapes else 0
        print(f"over {end - start:.1f} s with 100 idle connections and a slow body held open: {n} scrapes, "
              f"min(up) {up_min[0]['value'][1] if up_min else None}, scrape duration mean "
              f"{float(mean[0]['value'][1]) * 1000 if mean else float('nan'):.1f} ms, max "
              f"{float(slowest[0]['value'][1]) * 1000 if slowest else float('nan'):.1f} ms")
        idle_s = sorted(idle.lifetimes)
        slow_s = sorted(slow.lifetimes)
        print(f"server closed {len(idle_s)} idle connections after {idle_s[0] if idle_s else 0:.2f}-"
              f"{idle_s[-1] if idle_s else 0:.2f} s and {len(slow_s)} trickled bodies after "
              f"{', '.join(f'{t:.2f}' for t in slow_s)} s (connection timeout {timeout} s); "
              f"{held} idle connections open at the window's end")
        assert n >= (end - start) * 0.75, f"only {n} scrapes in {end - start:.0f} s at a 1 s interval"
        assert up_min and up_min[0]["value"][1] == "1", f"a scrape failed (up 0) in the window: {up_min}"
        assert slowest and float(slowest[0]["value"][1]) < scrape_timeout, (
               f"a scrape took {slowest} s, the scrape timeout is {scrape_timeout} s")
        assert held == 100, f"{held} idle connections open at the window's end, not 100"
        assert len(idle_s) >= 100, f"only {len(idle_s)} idle connections closed by the server in {window} s"
        assert all(timeout - 0.5 <= t <= timeout + 2.0 for t in idle_s), (
               f"idle connections closed after {idle_s[0]:.2f}-{idle_s[-1]:.2f} s, timeout {timeout} s")
        assert slow_s and all(timeout - 0.5 <= t <= timeout + 2.0 for t in slow_s), (
               f"trickled bodies closed after {slow_s} s, timeout {timeout} s")
        assert not slow.answers, f"the trickled body got an answer: {slow.answers}"
        status, _ = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200, f"a scrape after the window: {status}"
    finally:
        for t in (idle, slow):
            if t:
                t.stop.set()
                t.join(10)
        code = job.wait(timeout=120)
    assert code == 0, f"example exit {code}: {open(err_path).read()[-2000:]}"
