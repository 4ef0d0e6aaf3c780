"""What every integration suite takes from pytest: the paths ctest hands in as options, a run
directory per test whose logs are shown when the test fails, and ctest's skip status.

ctest runs each case alone (tests/CMakeLists.txt):
    python -m pytest -p no:cacheprovider -q -rA <suite>_test.py::test_<case> --build-dir ... """
import os
import shutil
import tempfile

import pytest

from prometheus_server import Prometheus
from ranks import ExampleRanks

# The options ctest hands in; a test that needs one fails with its description when it is missing.
PATHS = {
    "build-dir": "the build directory (its python/ holds the attnscope module)",
    "source-dir": "the source directory",
    "example": "the example program (build/examples/train_transformer)",
    "analyze": "attnscope-analyze (build/analysis/attnscope-analyze)",
    "program": "the MPI user program (build/tests/mpi_gpt)",
    "alertmanager": "the Alertmanager server (prometheus-alertmanager)",
}
LOG_SUFFIXES = (".log", ".err")
LOG_TAIL_CHARS = 3000
SKIPPED = 77  # ctest's SKIP_RETURN_CODE


def pytest_addoption(parser):
    group = parser.getgroup("attnscope", "attnscope integration tests")
    for name, description in PATHS.items():
        group.addoption(f"--{name}", metavar="PATH", help=description)


def path_option(request, name):
    value = request.config.getoption(name.replace("-", "_"))
    if not value:
        pytest.fail(f"--{name} is required: {PATHS[name]}", pytrace=False)
    return os.path.abspath(value)


def path_fixture(option, name):
    """A session fixture `name` giving the path of --<option>."""
    def fixture(request):
        return path_option(request, option)
    fixture.__doc__ = f"--{option}: {PATHS[option]}"
    return pytest.fixture(fixture, scope="session", name=name)


build_dir = path_fixture("build-dir", "build_dir")
source_dir = path_fixture("source-dir", "source_dir")
example = path_fixture("example", "example")
analyze_bin = path_fixture("analyze", "analyze_bin")
program = path_fixture("program", "program")
alertmanager_bin = path_fixture("alertmanager", "alertmanager_bin")


@pytest.fixture
def example_ranks(example, run_dir):
    """Ranks of the example program, their summaries and logs in the test's run directory."""
    return ExampleRanks(example, run_dir)


@pytest.fixture
def prometheus(run_dir):
    """Starts a real Prometheus (prometheus_server.Prometheus, its files in the run directory) when
    called with Prometheus' arguments, and stops it after the test."""
    started = []

    def start(*args, **kw):
        started.append(Prometheus(run_dir, *args, **kw))
        return started[-1]

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture
def run_dir(request):
    """A fresh directory for the test's processes, their files and logs (attnscope-<suite>-<case>-*
    under the temporary directory). Removed when the test passes; kept when it fails, and the
    failure report shows the tails of its logs (*.log, *.err) and where it is."""
    suite = request.module.__name__.removesuffix("_test")
    case = request.node.name.removeprefix("test_")
    tmp = tempfile.mkdtemp(prefix=f"attnscope-{suite}-{case}-")
    request.node.run_dir = tmp
    yield tmp
    if not getattr(request.node, "call_failed", False):
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    tmp = getattr(item, "run_dir", None)
    if report.when == "call" and report.failed:
        item.call_failed = True
        if tmp and os.path.isdir(tmp):
            for name in sorted(os.listdir(tmp)):
                if name.endswith(LOG_SUFFIXES):
                    with open(os.path.join(tmp, name), errors="replace") as f:
                        report.sections.append((f"{name} (tail)", f.read()[-LOG_TAIL_CHARS:]))
            report.sections.append(("run directory (kept)", tmp))
    return report


def pytest_sessionfinish(session, exitstatus):
    """Every selected test skipped (a tool missing here): exit 77, which ctest reports as skipped."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    if exitstatus == pytest.ExitCode.OK and stats.get("skipped") and not stats.get("passed"):
        session.exitstatus = SKIPPED
