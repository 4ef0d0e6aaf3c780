"""What the tests with a real Prometheus share: HTTP on loopback, waiting for a condition, a real
Prometheus server scraping the ranks listed in the file_sd file rank 0 writes, the example job
that serves those ranks, and the Grafana dashboard's queries."""
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from ranks import TINY, check, free_ports


def http_get(url, headers=None, data=None, method=None):
    req = urllib.request.Request(url, headers=headers or {}, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(what, fn, timeout):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {str(last)[:500]})")


class Prometheus:
    """A real Prometheus on a free loopback port, scraping the file_sd file `targets_file` (or the
    one `static_target`, host:port) every `interval` (also its scrape timeout and rule evaluation
    interval). `rule_files` are loaded and
    alerts go to the Alertmanager on loopback port `alertmanager_port` when given; `flags` are
    added to the command line."""

    def __init__(self, tmp, targets_file=None, interval="2s", rule_files=(), alertmanager_port=None,
                 flags=(), static_target=None):
        self.port = free_ports(1)
        cfg = os.path.join(tmp, "prometheus.yml")
        text = f"""global:
  scrape_interval: {interval}
  scrape_timeout: {interval}
  evaluation_interval: {interval}
"""
        if rule_files:
            text += "rule_files:\n" + "".join(f"  - '{f}'\n" for f in rule_files)
        if alertmanager_port:
            text += f"""alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:{alertmanager_port}']
"""
        text += """scrape_configs:
  - job_name: attnscope
    honor_labels: true
"""
        if static_target:
            text += f"""    static_configs:
      - targets: ['{static_target}']
"""
        else:
            text += f"""    file_sd_configs:
      - files: ['{targets_file}']
        refresh_interval: 1s
"""
        with open(cfg, "w") as f:
            f.write(text)
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{self.port}"] + list(flags),
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("prometheus ready", lambda: http_get(f"http://127.0.0.1:{self.port}/-/ready")[0] == 200, 60)

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(params)
        status, body = http_get(url)
        check(status == 200, f"query {expr!r}: HTTP {status}: {body[:300]}")
        return json.loads(body)["data"]["result"]

    def targets(self):
        """(scrape URL, health, last error) of each active target."""
        status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/targets")
        check(status == 200, f"targets: HTTP {status}: {body[:300]}")
        return [(t["scrapeUrl"], t["health"], t["lastError"]) for t in json.loads(body)["data"]["activeTargets"]]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def dashboard_queries(source, job):
    """(panel title, query) of every query of launch/grafana/attnscope.json, with Grafana's
    variables filled in for job `job`."""
    with open(os.path.join(source, "launch", "grafana", "attnscope.json")) as f:
        dash = json.load(f)
    for panel in dash["panels"]:
        for t in panel["targets"]:
            yield panel["title"], t["expr"].replace("$__rate_interval", "30s").replace("$job", job)


def start_example_job(tmp, example, source, targets, nproc, job, args, **env):
    """`nproc` ranks of the example (the TINY model plus `args`) under launch/torchrun as job `job`:
    a report every second, each rank's /metrics on a free loopback port, rank 0 writing the file_sd
    file `targets`; `env` is added to the ranks' environment; output in tmp/job.log. Returns the
    launcher's process and local rank 0's metrics port (rank r serves port + r)."""
    metrics_port = free_ports(nproc)
    master = free_ports(2)
    env = dict(os.environ, ATTNSCOPE_INTERVAL_S="1", ATTNSCOPE_BIND="127.0.0.1",
               ATTNSCOPE_PORT=str(metrics_port), ATTNSCOPE_FILE_SD=targets, ATTNSCOPE_JOB=job,
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **env)
    cmd = [os.path.join(source, "launch", "torchrun"), "--nproc_per_node", str(nproc), "--master_port", str(master),
           "--no_python", example] + TINY + ["--steps", "100000000"] + list(args)
    log = open(os.path.join(tmp, "job.log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), metrics_port
