"""The analysis cache: a hit is the same report byte for byte without a compile; any
part of the key changing is a miss; a corrupt entry is ignored and rewritten."""

import glob
import json
import os

import pytest

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend import cached_analysis
from jax_shard_lint.analyzer.cache import analysis_cache as cache_module
from jax_shard_lint.analyzer.cache.cache_key import cache_key

STEP = os.path.join("fixtures", "gate", "step_v1.py")


@pytest.fixture
def compiles(monkeypatch):
    """Every XLA compile of a jitted target and of checked-in StableHLO, counted."""
    count = {"n": 0}
    for name in ("compile_lowered", "compile_stablehlo_text"):
        real = getattr(jax_adapter, name)

        def counted(*args, _real=real, **kwargs):
            count["n"] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(jax_adapter, name, counted)
    return count


@pytest.fixture
def cache_dir(tmp_path):
    cached_analysis._open.clear()  # a fresh folder per test, with its own counts
    return str(tmp_path / "cache")


def _entries(folder):
    return sorted(glob.glob(os.path.join(folder, "v*", "*", "*.json")))


def _lints(cli, cache_dir, *steps):
    """``lint`` once per step (its extra arguments, or a callable run before the next lint)."""
    outs = []
    extra = []
    for step in steps:
        if callable(step):
            step()
            continue
        extra = list(step)
        script = extra.pop(0) if extra and extra[0].endswith(".py") else STEP
        result = cli("lint", script, "--format", "json", "--fail-on", "never", "-q", *extra,
                     *(("--cache-dir", cache_dir) if "--no-cache" not in extra else ()))
        assert result.code == 0, result.err
        outs.append(result.out)
    return outs


def _lint(cli, cache_dir, *extra):
    return _lints(cli, cache_dir, extra)[0]


def test_a_hit_is_the_same_report_without_a_compile(cli, cache_dir, compiles):
    counts = []
    first, second, uncached, sarif = _lints(
        cli, cache_dir, (), lambda: counts.append(compiles["n"]), (), lambda: counts.append(compiles["n"]),
        ("--no-cache",), lambda: counts.append(compiles["n"]), ("--format", "sarif"))
    assert counts == [1, 1, 2], "the second lint compiled again"
    assert second == first and uncached == first and len(_entries(cache_dir)) == 1
    assert compiles["n"] == 2 and sarif.startswith("{")  # the SARIF of the report cached by the JSON run


def test_two_callers_of_the_tool_share_an_entry(cli, cache_dir, compiles):
    """A program's source locations carry the whole Python stack, the frames that called the tool
    included (here this test's two lines; a user's tests through the pytest plugin): those are not
    the program, so the second lint, called from another line, is a hit with the same report."""
    args = ("lint", STEP, "--format", "json", "--fail-on", "never", "-q", "--cache-dir", cache_dir)
    first = cli(*args)
    second = cli(*args)
    assert first.code == second.code == 0, first.err + second.err
    assert second.out == first.out and compiles["n"] == 1 and len(_entries(cache_dir)) == 1


@pytest.mark.parametrize("change", [
    (os.path.join("fixtures", "gate", "step_v2_allgather.py"),),  # the program (its target is also "step")
    ("--threshold", "replicating-collective-bytes=1KiB"),  # what the rules are told
    ("--ignore", "SL201"),
    ("--budget", "1MiB"),
], ids=["program", "threshold", "ignore", "budget"])
def test_any_changed_part_is_a_miss(cli, cache_dir, compiles, change):
    """Any part changed is a miss of the analysis cache (a report of its own). A report setting changed (a
    threshold, the ignore list, the budget) compiles nothing: the compile memo holds the program's compile
    (analyzer/backend/compile_memo.py); the program changed misses both. The report is the uncached one."""
    _, changed, uncached = _lints(cli, cache_dir, (), change, (*change, "--no-cache"))
    assert compiles["n"] == (3 if change[0].endswith(".py") else 2) and len(_entries(cache_dir)) == 2
    assert changed == uncached


def test_other_compilers_or_tool_source_miss(cli, cache_dir, compiles, monkeypatch):
    real = jax_adapter.compiler_versions()
    _lints(cli, cache_dir, (),
           lambda: monkeypatch.setattr(jax_adapter, "compiler_versions", lambda: {**real, "jaxlib": "0.0.0-other"}), (),
           lambda: monkeypatch.setattr(cached_analysis, "tool_source_digest", lambda: "edited"), (),
           lambda: monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false"), (), ())
    assert compiles["n"] == 4 and len(_entries(cache_dir)) == 4  # the last lint: a hit


def test_xla_flags_that_change_no_figure_are_not_the_key(cli, cache_dir, compiles, monkeypatch):
    """The suite's XLA_FLAGS (LLVM at -O0 for its oracles, tests/conftest.py) against a console script's
    child without them, or a user's shell with a device count: the same figures (the tool compiles CPU
    programs at -O0 itself), one entry. Before, each was an entry of its own, compiled again."""
    first, without_flags, with_a_device_count = _lints(
        cli, cache_dir, (), lambda: monkeypatch.delenv("XLA_FLAGS", raising=False), (),
        lambda: monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 "
                                                "--xla_backend_optimization_level=2"), ())
    assert compiles["n"] == 1 and len(_entries(cache_dir)) == 1
    assert without_flags == first == with_a_device_count


def test_libtpu_settings_are_not_the_key_of_a_cpu_compile(cli, cache_dir, compiles, monkeypatch):
    """The tool sets TPU_ACCELERATOR_TYPE itself when it first compiles for a TPU target, and it stays set in
    the process: the README's commands in one process compiled again, after the TPU lint, each CPU program they
    had compiled before it (11 fix candidates of its main example). libtpu's settings change no CPU or GPU
    figure: one entry. A TPU compile's key keeps them."""
    from dataclasses import replace

    from jax_shard_lint.analyzer.context.config import Settings

    def libtpu_set():
        monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5p-8")
        monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=false")

    first, after_a_tpu_target = _lints(cli, cache_dir, (), libtpu_set, ())
    assert compiles["n"] == 1 and len(_entries(cache_dir)) == 1 and after_a_tpu_target == first

    def environment(settings):
        return cached_analysis.key_parts("lowered", "t", "module {}", settings, {"devices": []})["environment"]

    for platform in ("cpu", "h100", "tpu-v5p"):
        settings = replace(Settings(), platform=platform)
        monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
        monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
        without = environment(settings)
        libtpu_set()
        if platform == "tpu-v5p":
            assert environment(settings)["TPU_ACCELERATOR_TYPE"] == "v5p-8" and without["TPU_ACCELERATOR_TYPE"] is None
        else:
            assert environment(settings) == without and "TPU_ACCELERATOR_TYPE" not in without


@pytest.mark.parametrize("damage", ["truncated", "not-json", "other-key", "other-report"])
def test_a_corrupt_entry_is_ignored_and_rewritten(cli, cache_dir, compiles, damage):
    def corrupt():
        (entry,) = _entries(cache_dir)
        text = open(entry).read()
        data = json.loads(text)
        broken = {"truncated": text[: len(text) // 2], "not-json": "\x00\xff garbage",
                  "other-key": json.dumps({**data, "key": "0" * 64}),
                  "other-report": json.dumps({**data, "report": {"name": 1}})}[damage]
        with open(entry, "w", encoding="utf-8") as f:
            f.write(broken)

    first, again, hit = _lints(cli, cache_dir, (), corrupt, (), ())
    assert again == first and hit == first
    assert compiles["n"] == 1  # the corrupt entry cost its analysis (its compile read from the memo), then was whole
    (entry,) = _entries(cache_dir)
    assert json.load(open(entry))["key"] == os.path.basename(entry)[: -len(".json")]


def test_check_and_gate_reuse_a_snapshot_analysed_before(cli, cache_dir, compiles, tmp_path):
    snap = str(tmp_path / "snap")
    assert cli("snapshot", STEP, "-o", snap, "-q", "--no-cache").code == 0
    assert compiles["n"] == 1
    first = cli("gate", "--baseline", snap, "--format", "json", "--cache-dir", cache_dir)
    second = cli("gate", "--baseline", snap, "--format", "json", "--cache-dir", cache_dir)
    assert first.code == second.code == 0 and first.out == second.out
    assert compiles["n"] == 2  # the second gate compiled nothing
    check = cli("check", os.path.join(snap, "step.mlir"), "--format", "json", "--cache-dir", cache_dir)
    assert check.code == 0 and compiles["n"] == 2


def test_no_cache_writes_nothing_and_a_file_is_not_a_cache_folder(cli, tmp_path, compiles):
    folder = tmp_path / "cache"
    assert cli("lint", STEP, "-q", "--no-cache", "--fail-on", "never").code == 0
    assert not folder.exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = cli("lint", STEP, "-q", "--cache-dir", str(afile))
    assert result.code == 2
    assert result.err.strip() == f"jax-shard-lint: error: --cache-dir: {afile} is a file, not a folder"


def test_an_unwritable_cache_costs_a_compile_not_the_report(cli, tmp_path, compiles):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        cached_analysis._open.clear()
        first, second = _lints(cli, str(folder), (), ())
        assert first == second
        assert compiles["n"] == (2 if os.geteuid() != 0 else 1)  # root writes anyway
    finally:
        folder.chmod(0o700)


def test_what_it_compiles_for_is_in_the_key():
    from dataclasses import replace

    from jax_shard_lint.analyzer.context.config import Settings

    base = Settings()
    keys = {cache_key(cached_analysis.key_parts("lowered", "t", "module {}", s, {"devices": []}))
            for s in (base, replace(base, devices=4), replace(base, platform="h100"),
                      replace(base, platform="h100", hosts=2), replace(base, first_party=("mypkg",)))}
    assert len(keys) == 5


def test_key_parts_are_plain_json():
    assert cache_key({"a": [1, "b"], "c": None}) == cache_key({"c": None, "a": [1, "b"]})
    with pytest.raises(TypeError):
        cache_key({"a": object()})


def test_eviction_keeps_the_most_recently_used(tmp_path, monkeypatch):
    from jax_shard_lint.passes.models.report import TargetReport

    monkeypatch.setattr(cache_module, "MAX_ENTRIES", 2)
    cache = cache_module.AnalysisCache(str(tmp_path))
    report = TargetReport(name="t", platform="cpu", num_devices=1, mesh={}, memory=None, collectives=[],
                          inputs=[], outputs=[], findings=[])
    for k, key in enumerate(("a" * 64, "b" * 64)):
        cache.put(key, report, {})
        os.utime(cache._path(key), (1000 + k, 1000 + k))
    assert cache.get("a" * 64, TargetReport) is not None  # used now: newer than b
    cache.put("c" * 64, report, {})
    assert cache.get("b" * 64, TargetReport) is None
    assert cache.get("a" * 64, TargetReport) is not None and cache.get("c" * 64, TargetReport) is not None


def test_fit_reuses_its_probes(cli, cache_dir, compiles):
    remat = os.path.join("examples", "remat_layer_stack.py")
    outs = []
    for _ in range(2):  # one call line: the same programs
        result = cli("fit", remat, "--param", "batch", "--budget", "1GiB", "--multiple-of", "4", "--range", "4:64",
                     "--set", "layers=2", "--format", "json", "--cache-dir", cache_dir)
        assert result.code == 0, result.err
        outs.append(result.out)
        if len(outs) == 1:
            probes = compiles["n"]
    assert probes == len(json.loads(outs[0])["probes"]) and compiles["n"] == probes  # the second fit: no compile
    assert outs[0] == outs[1]


def test_suggest_reuses_the_versions_it_compiled(cli, cache_dir, compiles):
    value = os.path.join("examples", "value_function_step.py")
    outs, counts = [], []
    for _ in range(2):  # one call line: the same programs
        result = cli("suggest", value, "--target", "sharded_on_grid", "--set", "grid_points=1024", "--set",
                     "states=64", "--format", "json", "-q", "--cache-dir", cache_dir)
        assert result.code == 0, result.err
        report = json.loads(result.out)
        outs.append(report)
        counts.append(compiles["n"])
    assert counts[0] >= len(outs[0]["targets"][0]["versions"]) and counts[1] == counts[0]
    assert outs[0] == outs[1]


def _count_text_compiles(monkeypatch) -> dict[str, int]:
    """A counter of the StableHLO texts compiled (fix candidates, snapshots) from here on."""
    text_compiles = {"n": 0}
    real = jax_adapter.compile_stablehlo_text

    def counted(*args, **kwargs):
        text_compiles["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(jax_adapter, "compile_stablehlo_text", counted)
    return text_compiles


def test_fix_checks_compile_each_candidate_once_and_not_the_program_as_written(cli, cache_dir, compiles,
                                                                                monkeypatch):
    """lint's fix checks compare each candidate with lint's own compile of the program (the same module:
    not compiled again from its text), and a candidate's compile is a cache entry keyed by its text: the
    second lint of the SL105 fixture (one fix, P(None, 'model') on w1) compiles nothing. The first compiles the
    program once and five candidates: the rule's fix and suggest's four other single moves of w1, which the
    single-move-rivals stage compares with it (another argument holds the mesh axis w1 holds)."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    text_compiles = _count_text_compiles(monkeypatch)
    script = os.path.join("fixtures", "scripts", "sl105_unexplained_reshard.py")
    counts = []
    first, second = _lints(cli, cache_dir, (script, "--target", "contracted"),
                           lambda: counts.append((compiles["n"], text_compiles["n"])),
                           (script, "--target", "contracted"))
    checked = [f["fix_check"] for t in json.loads(first)["targets"] for f in t["findings"] if f["fix_check"]]
    assert [c["verdict"] for c in checked] == ["better"], checked
    assert counts == [(6, 5)], "lint's compile and the five candidates', nothing else"
    assert compiles["n"] == 6 and second == first


def test_check_on_a_snapshot_reads_the_fix_candidates_lint_compiled(cli, cache_dir, compiles, monkeypatch,
                                                                     tmp_path):
    """A candidate's entry is keyed by its program without source locations: check on the snapshot of a
    script lint has checked (the same program read from a file, its locations numbered apart, no user roots)
    compiles the snapshot's text and no candidate, and measures the same fix as lint did. The snapshot itself
    is lint's entry: its command reaches the script by a longer call chain, which is not the program."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    text_compiles = _count_text_compiles(monkeypatch)
    script = os.path.join("fixtures", "scripts", "sl105_unexplained_reshard.py")
    [linted] = _lints(cli, cache_dir, (script, "--target", "contracted"))
    after_lint = compiles["n"]
    snap = cli("snapshot", script, "--target", "contracted", "-o", str(tmp_path / "snap"), "-q",
               "--cache-dir", cache_dir)
    assert snap.code == 0, snap.err
    assert compiles["n"] == after_lint, "the snapshot compiled the program lint had compiled"
    before = text_compiles["n"]
    checked = cli("check", str(tmp_path / "snap" / "contracted.mlir"), "--format", "json", "--fail-on", "never",
                  "-q", "--cache-dir", cache_dir)
    assert checked.code == 0, checked.err
    assert text_compiles["n"] - before == 1, "check compiled a candidate lint had compiled"

    def checks(out):
        return [(f["rule"], f["fix_check"]) for t in json.loads(out)["targets"] for f in t["findings"]
                if f["fix_check"]]

    assert checks(checked.out) == checks(linted) and [c["verdict"] for _, c in checks(linted)] == ["better"]


def test_an_entry_asked_for_while_it_is_computed_is_waited_for_not_computed_again(tmp_path):
    """Two runs on one folder (pytest-xdist's workers, sweep --jobs, Ray workers) asking for the same key at
    once: the second waits for the first's computing and reads its entry; a different key is computed beside
    it (a lock per entry, not one for the folder). Each run has its own AnalysisCache, as a process has; the
    lock is a file lock, taken by each thread on its own open file as by each process."""
    import threading

    from jax_shard_lint.analyzer.commands.fit import ProbePeak

    folder = str(tmp_path / "cache")
    computing_first, finish_first = threading.Event(), threading.Event()
    computed, results = [], {}

    def ask(label: str, key_part: str, peak: int, first: bool = False):
        cache = cache_module.AnalysisCache(folder)

        def compute() -> ProbePeak:
            computed.append(label)
            if first:
                computing_first.set()
                assert finish_first.wait(60)
            return ProbePeak(peak_bytes=peak)

        results[label] = (cached_analysis.cached(cache, lambda: {"program": key_part}, compute, ProbePeak),
                          cache.stats())

    first = threading.Thread(target=ask, args=("first", "A", 1, True))
    first.start()
    assert computing_first.wait(60)
    same = threading.Thread(target=ask, args=("same key", "A", 2))
    same.start()
    ask("other key", "B", 3)  # while the first still computes A
    same.join(0.5)
    assert same.is_alive() and computed == ["first", "other key"], "the same key was computed beside the first"
    finish_first.set()
    first.join(60)
    same.join(60)
    assert computed == ["first", "other key"]
    assert results["same key"][0].peak_bytes == 1, "not the entry the first wrote"
    assert results["same key"][1] == cache_module.CacheStats(hits=1, misses=0)
    assert results["first"][1] == results["other key"][1] == cache_module.CacheStats(hits=0, misses=1)
    assert not glob.glob(os.path.join(folder, "v*", "*", "*" + cache_module.LOCK_SUFFIX)), "a lock file was left"
