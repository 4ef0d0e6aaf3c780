#!/usr/bin/env python3
"""Alerting end to end: real ranks, a real Prometheus with the shipped rules, a real Alertmanager
with the shipped routing, and a webhook receiver in this process.
Run by ctest: pytest alerts_test.py::test_<case> --example EXAMPLE_BINARY --source-dir SOURCE_DIR
--alertmanager ALERTMANAGER_BINARY

Cases:
  alertmanager_e2e  2 ranks under torchrun (launch/torchrun), rank 1 running layer 1's attention 4
                    times a step; Prometheus scrapes them through rank 0's file_sd file and
                    evaluates launch/prometheus/attnscope-rules.yml with every `for:` in seconds
                    instead of minutes (the expressions, labels and annotations as shipped); its
                    alerts go to prometheus-alertmanager running launch/prometheus/alertmanager.yml
                    with 1 s group_wait, group_interval and repeat_interval and the webhook on
                    loopback. The webhook receives AttnscopeStraggler for rank 1 and
                    AttnscopeStragglerLayer for rank 1, layer layers.1.attn (the detector's
                    attribution in rank 0's job summary names only that layer; every layer label
                    sent is one of the example's layers.0-3.attn); the dashboard's alert list
                    shows them; no
                    straggler alert is ever pending or firing for rank 0; no resolved notification
                    comes while the job trains, and after it ends the webhook receives both as
                    resolved.
"""
import http.server
import json
import os
import re
import subprocess
import threading
import time

import pytest

from prometheus_server import dashboard_queries, http_get, start_example_job, wait_for
from ranks import TINY, free_ports

JOB = "alerts-e2e"
SLOW_RANK, SLOW_LAYER = 1, 1
# The example names its layers layers.<i>.attn (examples/TransformerModel.cpp).
LAYERS = {f"layers.{i}.attn" for i in range(int(TINY[TINY.index("--layers") + 1]))}
STRAGGLER_ALERTS = ("AttnscopeStraggler", "AttnscopeStragglerLayer")

# Time scale. The ranks report every INTERVAL_S (ATTNSCOPE_INTERVAL_S, the detector's window);
# Prometheus scrapes and evaluates at the same interval. The rules' `for:` minutes become seconds
# (AttnscopeStraggler's and AttnscopeStragglerLayer's 5m: 5 s). Alertmanager waits AM_INTERVAL_S
# before the first notification of a group and between notifications of a group.
INTERVAL_S = 1
WINDOWS = 3          # ATTNSCOPE_STRAGGLER_WINDOWS (the default): rounds above the threshold
AM_INTERVAL_S = 1
JOB_S = 40           # the job's training time (--duration-s)
# Time to fire after the launcher starts: the ranks' start (LibTorch, the gradient group, the
# first round), WINDOWS rounds to flag the rank, a scrape and an evaluation to see the flag, the
# 5 s `for:`, then Alertmanager's group_wait: 11-14 s measured here (10 + start expected). The
# deadline is the job's whole run, START_S allowed for its start then JOB_S of training (the
# alerts must fire while it runs): more than 3x what was measured.
START_S = 10
FIRE_DEADLINE_S = START_S + JOB_S
# After the ranks' endpoints close: the next scrape fails and marks their series stale
# (INTERVAL_S), the next evaluation finds the alert's expression empty and sends it resolved
# (INTERVAL_S), Alertmanager notifies at the group's next group_interval (AM_INTERVAL_S): about
# 3 s expected (1.4 s measured after the last scrape). The deadline, counted from the launcher's
# exit (the endpoints close before it), gives 5x.
RESOLVE_DEADLINE_S = 5 * (2 * INTERVAL_S + AM_INTERVAL_S)


class Webhook:
    """Alertmanager's webhook receiver on loopback: keeps every notification POSTed (its JSON, the
    time it came) for the path Alertmanager is configured with."""

    PATH = "/attnscope-alerts"

    def __init__(self):
        self.notifications = []
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = self.path == Webhook.PATH
                if ok:
                    with hook.lock:
                        hook.notifications.append((time.time(), json.loads(body)))
                self.send_response(200 if ok else 404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{Webhook.PATH}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self):
        """(time received, alert) of every alert in every notification so far."""
        with self.lock:
            return [(t, a) for t, n in self.notifications for a in n["alerts"]]

    def first(self, status, alertname, **labels):
        """When the first notification with that alert in that status came, or None."""
        for t, a in self.alerts():
            if a["status"] == status and a["labels"]["alertname"] == alertname and \
                    all(a["labels"].get(k) == v for k, v in labels.items()):
                return t
        return None

    def stop(self):
        self.server.shutdown()


def rewrite(text, pattern, replacement, expected, what):
    """`text` with `pattern` replaced; fails unless it matched exactly `expected` times."""
    new, n = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert n == expected, f"{what}: {n} replacements, expected {expected}"
    return new


def fast_rules(tmp, rules_dir):
    """launch/prometheus/attnscope-rules.yml with every alert's `for: Nm` as `for: Ns`."""
    with open(os.path.join(rules_dir, "attnscope-rules.yml")) as f:
        text = f.read()
    alerts = len(re.findall(r"^ *- alert: ", text, flags=re.MULTILINE))
    text = rewrite(text, r"^( *for: )(\d+)m$", r"\g<1>\g<2>s", alerts, "rules: every alert's for: in minutes")
    path = os.path.join(tmp, "attnscope-rules.yml")
    with open(path, "w") as f:
        f.write(text)
    return path


class Alertmanager:
    """prometheus-alertmanager on a free loopback port with launch/prometheus/alertmanager.yml,
    its webhook pointed at `webhook_url` and its waits at AM_INTERVAL_S; no cluster."""

    def __init__(self, binary, tmp, rules_dir, webhook_url):
        with open(os.path.join(rules_dir, "alertmanager.yml")) as f:
            text = f.read()
        text = rewrite(text, r"^( *(?:- )?url: ).*$", rf"\g<1>'{webhook_url}'", 1, "alertmanager.yml: the webhook")
        for key, n in (("group_wait", 1), ("group_interval", 1), ("repeat_interval", 2)):
            text = rewrite(text, rf"^( *{key}: )\S+$", rf"\g<1>{AM_INTERVAL_S}s", n, f"alertmanager.yml: {key}")
        cfg = os.path.join(tmp, "alertmanager.yml")
        with open(cfg, "w") as f:
            f.write(text)
        self.port = free_ports(1)
        self.log = open(os.path.join(tmp, "alertmanager.log"), "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.path={os.path.join(tmp, 'alertmanager')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("alertmanager ready", lambda: http_get(f"http://127.0.0.1:{self.port}/-/ready")[0] == 200, 60)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def rules_dir(source_dir):
    """The shipped rules and configurations (launch/prometheus)."""
    return os.path.join(source_dir, "launch", "prometheus")


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.stop()


@pytest.fixture
def alertmanager(alertmanager_bin, run_dir, rules_dir, webhook):
    """A real Alertmanager with the shipped routing, notifying `webhook`; stopped after the test."""
    am = Alertmanager(alertmanager_bin, run_dir, rules_dir, webhook.url)
    yield am
    am.stop()


def test_alertmanager_e2e(run_dir, example, source_dir, rules_dir, webhook, alertmanager, prometheus):
    hook, am = webhook, alertmanager
    targets = os.path.join(run_dir, "targets.json")
    prom = prometheus(targets, interval=f"{INTERVAL_S}s", rule_files=[fast_rules(run_dir, rules_dir)],
                      alertmanager_port=am.port, flags=[f"--rules.alert.resend-delay={INTERVAL_S}s"])
    slow = str(SLOW_RANK)
    slow_layer = f"layers.{SLOW_LAYER}.attn"
    started = time.time()
    job, _ = start_example_job(
        run_dir, example, source_dir, targets, 2, JOB,
        ["--duration-s", str(JOB_S), "--slow-rank", slow, "--slow-factor", "4", "--slow-layer", str(SLOW_LAYER)],
        ATTNSCOPE_STRAGGLER_WINDOWS=str(WINDOWS))
    try:
        def fired():
            assert job.poll() is None, f"the job ended (exit {job.returncode}) before the alerts fired"
            times = [hook.first("firing", "AttnscopeStraggler", job=JOB, rank=slow),
                     hook.first("firing", "AttnscopeStragglerLayer", job=JOB, rank=slow, layer=slow_layer)]
            return times if None not in times else None
        t_straggler, t_layer = wait_for(
            f"AttnscopeStraggler and AttnscopeStragglerLayer for rank {slow} at the webhook",
            fired, FIRE_DEADLINE_S)
        print(f"webhook: firing AttnscopeStraggler rank {slow} {t_straggler - started:.1f} s after the "
              f"launcher started, AttnscopeStragglerLayer {slow_layer} {t_layer - started:.1f} s")
        # What the detector names behind the straggler, as the rule reads it: the slow layer only.
        shares = {(r["metric"]["rank"], r["metric"]["layer"]): float(r["value"][1])
                  for r in prom.query(f'job_rank_layer:attnscope_straggler_attribution_share:max{{job="{JOB}"}}')}
        print("the detector's attribution (share of the excess) per (rank, layer):",
              {f"{k[0]} {k[1]}": round(v, 2) for k, v in sorted(shares.items())})
        assert set(shares) == {(slow, slow_layer)}, f"attribution in Prometheus: {shares}"

        # The dashboard's alert list ("Firing attnscope alerts"), its query as Grafana sends it.
        alert_list = [q for _, q in dashboard_queries(source_dir, JOB) if q.startswith("ALERTS{")]
        assert len(alert_list) == 1, f"the dashboard has {len(alert_list)} ALERTS queries, expected 1"
        shown = {(r["metric"]["alertname"], r["metric"].get("rank"), r["metric"].get("layer"))
                 for r in prom.query(alert_list[0])}
        want = {("AttnscopeStraggler", slow, None), ("AttnscopeStragglerLayer", slow, slow_layer)}
        assert want <= shown, f"the dashboard's alert list ({alert_list[0]}) shows {sorted(shown, key=str)}"
        print(f"dashboard: {alert_list[0]} lists", sorted(shown, key=str))
    finally:
        try:
            code = job.wait(timeout=START_S + JOB_S + 120)
        except subprocess.TimeoutExpired:
            job.kill()
            raise AssertionError(f"the job still runs {START_S + JOB_S + 120} s after it started")
    ended = time.time()
    assert code == 0, f"torchrun exit {code}; see {run_dir}/job.log"

    def resolved():
        times = [hook.first("resolved", "AttnscopeStraggler", job=JOB, rank=slow),
                 hook.first("resolved", "AttnscopeStragglerLayer", job=JOB, rank=slow, layer=slow_layer)]
        return times if None not in times else None
    resolved_at = wait_for("both alerts resolved at the webhook", resolved, RESOLVE_DEADLINE_S)
    # Firing from the first notification to the end of training: no resolved notification
    # while the job trained (a flag that drops for one round would resolve the alert).
    assert min(resolved_at) > started + JOB_S, (
           f"resolved {min(resolved_at) - started:.1f} s after the launcher started, before training ended "
           f"({JOB_S} s of training)")
    # Why it resolved: the flag's last value, and the last scrape that had it (rank 0's
    # endpoint closes as the job ends; the next scrape fails and marks the series stale).
    series = f'attnscope_straggler{{job="{JOB}", rank="{slow}"}}'
    last_flag = prom.query(f"last_over_time({series}[10m])")[0]["value"][1]
    last_seen = float(prom.query(f"max_over_time(timestamp({series})[10m:{INTERVAL_S}s])")[0]["value"][1])
    print(f"webhook: resolved {', '.join(f'{t - last_seen:+.1f} s' for t in resolved_at)} "
          f"(AttnscopeStraggler, AttnscopeStragglerLayer) after the last scrape of rank {slow}'s "
          f"flag (last value {last_flag}), {', '.join(f'{t - ended:+.1f} s' for t in resolved_at)} after the "
          f"launcher exited")

    # The labels and text as sent: only the slow rank, and layers by the example's names.
    sent = [a for _, a in hook.alerts() if a["labels"]["alertname"] in STRAGGLER_ALERTS]
    for a in sent:
        labels = a["labels"]
        assert labels.get("job") == JOB and labels.get("rank") == slow, f"straggler alert sent: {labels}"
        if labels["alertname"] == "AttnscopeStragglerLayer":
            assert labels.get("layer") in LAYERS, f"layer alert sent: {labels}"
            assert (a["annotations"]["summary"].startswith(
                  f"Layer {labels['layer']} makes straggler rank {slow} of job {JOB} slow: ")), (
                  f"summary: {a['annotations']['summary']}")
    # Prometheus' own record of the alerts' states (pending and firing), over the whole run.
    others = prom.query(f'count_over_time(ALERTS{{alertname=~"{"|".join(STRAGGLER_ALERTS)}", '
                        f'job="{JOB}", rank!="{slow}"}}[10m])')
    assert not others, f"straggler alerts pending or firing for other ranks: {others}"
    # Other layers of the slow rank: the detector names one cell a round, the slow layer's here
    # (its share of the excess is the largest by far); counted, not asserted.
    other_layers = {(a["metric"]["layer"], a["metric"]["alertstate"]): int(a["value"][1])
                    for a in prom.query(f'count_over_time(ALERTS{{alertname="AttnscopeStragglerLayer", '
                                        f'job="{JOB}", layer!="{slow_layer}"}}[10m])')}
    print(f"{len(sent)} straggler alerts sent, all for rank {slow}; none pending or firing "
          f"for rank 0; other layers of rank {slow} (evaluations pending or firing): {other_layers or 'none'}")
