"""Tests run on 8 virtual CPU devices, configured before JAX initialises."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# Nothing is written to the user's cache folder: a run's tests share one analysis cache of their own
# (_analysis_cache_of_the_run below), so each (program, settings) the tests lint is analysed once per run, not
# once per test (an example is linted by dozens), and each program compiled once whatever the report settings
# (its compile memo: analyzer/backend/compile_memo.py). Child processes inherit it. A test of the cache itself names
# its own --cache-dir (tests/analyzer/cache); a test of what happens while compiling passes --no-cache.
os.environ.pop("JAX_SHARD_LINT_NO_CACHE", None)
# lint compiles each finding's fix by default (a few more compiles per target): the tests of that
# (tests/analyzer/commands/test_fix_checks.py) turn it on; the rest test what is found.
os.environ["JAX_SHARD_LINT_NO_FIX_CHECK"] = "1"
# A long phase is named on a log's stderr after 3 s (analyzer/cli/emit.py): on a loaded machine any compile
# can take that long, so the tests of stderr see it only where they ask (tests/analyzer/cli/test_progress.py).
os.environ["JAX_SHARD_LINT_PHASE_NOTICE_S"] = "3600"
# Tests run side by side (pytest-xdist, as .ci/run runs them), and a test that compiles for a TPU target in
# this process loads libtpu, whose machine-wide lock would let only one process in; compile-only targets
# use no TPU. The console script's supervisor sets it for its child the same way.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
# The tests' own direct compiles (their oracles) skip LLVM's optimisation of the CPU machine code, as the
# tool's compiles do (analyzer/adapter/compiling.py): nothing compiled here runs long enough for it to pay,
# and the compiled text and memory_analysis() are XLA's defaults' (tests/analyzer/adapter/
# test_read_only_compile.py compares them in a child process without this flag). ~40% less CPU per compile.
if "--xla_backend_optimization_level=0" not in os.environ.get("XLA_FLAGS", "").split():
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
EXAMPLES = os.path.join(ROOT, "examples")


def golden_dir() -> str:
    """The golden reports for the JAX release the suite runs on: the pinned release's in tests/golden,
    a newer one's in tests/golden/jax-X.Y (its StableHLO names values and ops differently: closed_call
    became eval_jaxpr in 0.12). Written by tests/golden/generate.py run on that release."""
    import jax

    release = ".".join(jax.__version__.split(".")[:2])
    base = os.path.join(ROOT, "tests", "golden")
    return base if release == PINNED_JAX_RELEASE else os.path.join(base, f"jax-{release}")


PINNED_JAX_RELEASE = "0.10"


def console_script() -> str:
    """The jax-shard-lint console script of the Python running the tests (CI runs the suite in two
    environments: the one first on PATH may be the other's)."""
    import shutil
    import sys

    beside = os.path.join(os.path.dirname(sys.executable), "jax-shard-lint")
    found = beside if os.path.exists(beside) else shutil.which("jax-shard-lint")
    assert found, "the jax-shard-lint console script is not installed (pip install -e '.[test]')"
    return found


def lint_targets(cli, *args):
    """``lint ARGS`` as JSON (never failing on findings): its targets."""
    import json

    result = cli("lint", *args, "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


class CliResult:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run ``jax-shard-lint ARGS`` in this process (JAX stays initialised) from the repo root."""
    from jax_shard_lint.analyzer.cli.main import run_command as main

    monkeypatch.chdir(ROOT)

    def run(*args):
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), the tests of a module that share a module-scoped fixture
    (a Ray cluster, a corpus run once, a brute-force table) run in one worker, which builds it once;
    every other test goes wherever a worker is free."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d and d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # The modules that hold slow tests (TPU compiles of minutes) go first, each kept whole and in its order, then
    # the real model libraries' (a model's step compiled with each fix, 15-40 s a test): started last, one of them
    # would keep a worker busy alone at the end of the run. pytest-xdist then hands out the groups first (largest
    # first) and the other tests in this order.
    with_slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.nodeid.split("::")[0] not in with_slow,
                                 not item.nodeid.startswith("tests/real_models/")))


@pytest.fixture(scope="session", autouse=True)
def _analysis_cache_of_the_run(tmp_path_factory):
    """One folder for the run, shared by pytest-xdist's workers (each has its own basetemp inside the run's);
    pytest removes it with the run's temporary folders. Entries are written by renaming, so workers can share it."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    os.environ["JAX_SHARD_LINT_CACHE_DIR"] = str(run / "analysis-cache")
    yield


@pytest.fixture(autouse=True)
def _forget_imported_scripts():
    # Each lint imports the script afresh; fixture helpers like _mesh are shared modules.
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("_shard_lint_script_"):
            del sys.modules[name]
