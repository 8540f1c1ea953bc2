"""Compiling for TPU slices on this CPU-only machine (libtpu's compile-only
devices, installed by CI through the [tpu] extra; skipped where it is absent).
The oracle is XLA's TPU compiler itself: the same program compiled directly for
the same topology."""

import json
import os
import re
import subprocess

import pytest
from ci_deps import require

require("libtpu", "the [tpu] extra (libtpu) is not installed", allow_module_level=True)

from conftest import ROOT, console_script, lint_targets  # noqa: E402
from shared_compiles import direct_compiles  # noqa: E402

from jax_shard_lint.analyzer.errors import ShardLintInputError  # noqa: E402
from jax_shard_lint.analyzer.platforms.tpu_targets import TPU_GENERATIONS, default_topology, resolve_target, tpu_devices  # noqa: E402

FSDP = os.path.join("examples", "fsdp_tp_train_step.py")
REMAT = os.path.join("examples", "remat_layer_stack.py")
VALUE = os.path.join("examples", "value_function_step.py")
MAXTEXT = os.path.join("examples", "maxtext_like_step.py")
TRAIN_COMPILE = os.path.join("fixtures", "scripts", "train_compile_tpu.py")
OVER_HBM = ("--set", "d_model=8192", "--set", "d_ff=32768", "--set", "layers=32")  # 19.1 GiB of temporaries
# The MaxText-like step as fixtures/scripts/train_compile_tpu.py compiles it: smaller than the example's
# default (a third of the TPU compile's time), with the same program: the splash-attention kernel (seq 512, its
# block), FSDP gathers in pieces of one channel, the stacked layers' gathers counted per layer.
MAXTEXT_SMALL = {"layers": 2, "d_model": 512, "d_ff": 1024, "vocab": 2048}


@pytest.mark.parametrize("platform, devices, topology", [
    ("tpu-v5e", 8, "2x4"), ("tpu-v5e", 16, "4x4"), ("tpu-v6e", 64, "8x8"),
    ("tpu-v5p", 8, "2x2x2"), ("tpu-v5p", 16, "2x2x4"), ("tpu-v4", 8, "2x2x2"), ("tpu-v4", 4, "2x2x1"),
])
def test_default_topologies(platform, devices, topology):
    assert default_topology(TPU_GENERATIONS[platform], devices) == topology


@pytest.mark.parametrize("platform", sorted(TPU_GENERATIONS))
def test_every_generation_gives_compile_only_devices(platform):
    target = resolve_target(platform, 8, None)
    devices = tpu_devices(target)
    assert len(devices) == 8 == target.num_devices
    assert devices[0].platform == "tpu"
    assert len({d.process_index for d in devices}) == 2  # a slice of 8 chips spans two hosts


def _direct_compile(path, platform, **params):
    """The example's own targets compiled for the same TPU devices, without the tool (once per test run:
    tests/shared_compiles.py)."""
    return direct_compiles(os.path.splitext(os.path.basename(path))[0], platform, **params)


_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")


def _collective_lines(hlo):
    return [line for line in hlo.splitlines() if " = " in line and any(
        f" {k}(" in line or f" {k}-start(" in line for k in _KINDS)]


def _distinct_collectives(hlo):
    """Collectives counted once per channel: TPU clones one gather into start, continuation and done
    pieces that share its channel id."""
    lines = _collective_lines(hlo)
    channels = {m.group(1) for line in lines for m in [re.search(r"channel_id=(\d+)", line)] if m}
    return len(channels) + sum(1 for line in lines if "channel_id=" not in line)


def _sets(params):
    return [a for k, v in params.items() for a in ("--set", f"{k}={v}")]


# FSDP runs on both JAX releases in CI: libtpu 0.0.50 (JAX 0.12) offloads its embedding gather to the SparseCores.
# FSDP at its default size: its direct compile is test_stored_compiled_texts.py's too. The layer stack at the README's
# TPU command's batch (8): the program the README test lints for a v5p, read from the run's compile memo where either
# test compiled it first. The value function on a smaller grid (2048 points): the same program, 15% less CPU to
# compile for a TPU than at 16384.
@pytest.mark.parametrize("path, params", [
    (FSDP, {}),
    pytest.param(REMAT, {"batch": 8}, marks=pytest.mark.slow),
    pytest.param(VALUE, {"grid_points": 2048}, marks=pytest.mark.slow),
], ids=[FSDP, REMAT, VALUE])
def test_peak_and_collectives_are_the_tpu_compilers(cli, path, params):
    targets = lint_targets(cli, path, "--platform", "tpu-v5p", *_sets(params))
    direct = _direct_compile(path, "tpu-v5p", **params)
    for t in targets:
        assert t["platform"].startswith("tpu-v5p (compiled for 8 x TPU-V5P, topology v5p:2x2x2 over 2 hosts")
        m = direct[t["name"]].memory_analysis()
        peak = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
        assert t["memory"]["peak_bytes"] == peak
        assert t["memory"]["budget_bytes"] == 95 * 2**30
        hlo = direct[t["name"]].as_text()
        assert len(t["collectives"]) == _distinct_collectives(hlo)
        assert sum(1 + len(c["pieces"]) for c in t["collectives"]) == len(_collective_lines(hlo))
        for c in t["collectives"]:
            assert c["mesh_axes"] and not c["mesh_axes"][0].startswith("<"), c  # the user's axis names
        if t["collectives"]:
            assert set(t["axis_scope"].values()) <= {"within-host", "cross-host"}


def test_bad_topologies_are_one_line_input_errors(cli):
    result = cli("lint", REMAT, "--platform", "tpu-v5e", "--topology", "3x3", "-q")
    assert result.code == 2
    assert result.err.strip().startswith("jax-shard-lint: error: --topology: libtpu has no topology v5e:3x3")
    assert len(result.err.strip().splitlines()) == 1
    result = cli("lint", REMAT, "--platform", "h100", "--topology", "2x2", "-q")
    assert result.code == 2 and "needs a TPU target platform" in result.err
    with pytest.raises(ShardLintInputError, match="pass --topology"):
        resolve_target("tpu-v5e", 6, None)


# The largest multiple of 64 of the remat example's batch under a v5p chip's 95 GiB on the pinned JAX: fit over
# 64:4096 probes 64, 128, 1408 and 1472 to find it (searching is test_run_and_fit.py's, against brute force).
FITS_ON_V5P = 1408


@pytest.mark.slow  # over 30 s: run on the pinned JAX only in CI (.ci/run)
def test_fit_takes_its_budget_from_the_platform(cli):
    """No --budget: a TPU target's is its chip's HBM. The range is the answer and the next multiple, so the
    search's one decision (two TPU compiles, where 64:4096 took four) is the platform's budget's, and lint at
    the answer, for the same platform, finds it fits."""
    result = cli("fit", REMAT, "--param", "batch", "--platform", "tpu-v5p", "--multiple-of", "64",
                 "--range", f"{FITS_ON_V5P}:{FITS_ON_V5P + 64}", "--format", "json", "-q")
    assert result.code == 0, result.err
    fit = json.loads(result.out)
    assert fit["budget_bytes"] == 95 * 2**30
    assert (fit["value"], fit["next_value"]) == (FITS_ON_V5P, FITS_ON_V5P + 64)
    assert fit["peak_bytes"] <= fit["budget_bytes"] < fit["next_peak_bytes"]
    [t] = lint_targets(cli, REMAT, "--platform", "tpu-v5p", "--set", f"batch={fit['value']}")
    assert t["memory"]["peak_bytes"] <= t["memory"]["budget_bytes"]
    assert not [f for f in t["findings"] if f["rule"] == "SL301"]


def test_maxtext_like_step_with_its_pallas_attention(cli):
    """The TPU compile has a Pallas splash-attention custom call printed over three lines, and FSDP gathers
    split into pieces of one channel: figures against the compiler's own, once per channel."""
    [t] = lint_targets(cli, MAXTEXT, "--platform", "tpu-v5e", *_sets(MAXTEXT_SMALL))
    compiled = _direct_compile(MAXTEXT, "tpu-v5e", **MAXTEXT_SMALL)["train_step"]
    hlo = compiled.as_text()
    assert "tpu_custom_call" in hlo and re.search(r'^"xprof_metadata"', hlo, re.M)
    m = compiled.memory_analysis()
    assert t["memory"]["peak_bytes"] == (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
                                         - m.alias_size_in_bytes)
    assert len(t["collectives"]) == _distinct_collectives(hlo) < len(_collective_lines(hlo))
    # The stacked layers' gathers and gradient reductions are FSDP's: SL102 says nothing about them.
    assert {c["intent"] for c in t["collectives"] if c["count"] > 1} <= {"parameter-gather", "gradient-reduction",
                                                                          "reshard"}
    assert not [f for f in t["findings"] if f["rule"] == "SL102"]


# A batch large enough that TPU turns the FSDP gathers and the gradients' reduce-scatters into collective
# matmuls (rings of async collective-permutes inside windowed-einsum loops): 16 sequences of 512 at the small
# model size (70 permutes, as MaxText's default size in small: d_model=2048 d_ff=7168 seq=2048 batch=96 gave;
# batch 8 gives one), a third of that size's TPU compile.
COLLECTIVE_MATMUL = {**MAXTEXT_SMALL, "batch": 16}


@pytest.mark.slow
def test_collective_matmul_rings_are_fsdp_traffic(cli):
    """TPU's collective matmuls pass a layer's weight shard (in the layout the matmul reads: at d_model=2048,
    wq's (256, 2048) layer as (16, 128, 1, 256)) round a ring of collective-permutes, through async done, VMEM
    copies and the loop's carried tuple; the backward ring passes the gradient's partial sums, each device adding
    its part. All 70 were 'reshard' and SL102 fired on 1.2 GiB of them at that size; every permute XLA compiled
    is FSDP's now."""
    [t] = lint_targets(cli, MAXTEXT, "--platform", "tpu-v5e", *_sets(COLLECTIVE_MATMUL))
    hlo = _direct_compile(MAXTEXT, "tpu-v5e", **COLLECTIVE_MATMUL)["train_step"].as_text()
    permutes = {m.group(1) for line in _collective_lines(hlo) if " collective-permute" in line
                for m in [re.search(r"channel_id=(\d+)", line)] if m}
    found = [c for c in t["collectives"] if c["kind"] == "collective-permute"]
    assert len(found) == len(permutes) > 0
    assert {c["intent"] for c in found} == {"parameter-gather", "gradient-reduction"}
    assert not [f for f in t["findings"] if f["rule"] == "SL102"]


def test_a_program_over_the_chips_memory_is_a_finding_with_the_compilers_figures():
    """As a user runs it (the installed console script, from the project folder): exit 1 on an SL301
    error finding, where a compile error was an exit 2; at the user's lower() line, never the tool's own
    (an editable install inside the project made the tool's child the outermost user frame)."""
    result = subprocess.run([console_script(), "lint", MAXTEXT, "--platform", "tpu-v5e", *OVER_HBM,
                             "--format", "json", "-q"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 1, result.stderr[-2000:]
    [t] = json.loads(result.stdout)["targets"]
    [f] = [f for f in t["findings"] if f["rule"] == "SL301"]
    assert "compiler refused the program" in f["message"] and "RESOURCE_EXHAUSTED" in f["message"]
    with open(os.path.join(ROOT, MAXTEXT)) as source:
        lower_line = next(i for i, text in enumerate(source, 1) if ".lower(params, batch_tree)" in text)
    assert (f["source"]["file"], f["source"]["line"]) == (MAXTEXT, lower_line)
    assert t["memory"] is None and t["collectives"] == [] and t["inputs"]


def test_fit_reads_a_refusal_as_does_not_fit(cli):
    result = cli("fit", MAXTEXT, "--param", "layers", "--platform", "tpu-v5e", "--set", "d_model=8192",
                 "--set", "d_ff=32768", "--range", "32:40", "--format", "json", "-q")
    assert result.code == 1, result.err  # nothing in the range fits
    fit = json.loads(result.out)
    assert fit["value"] is None
    assert fit["probes"][0]["refused_by_compiler"] and not fit["probes"][0]["fits"]


def test_run_reports_a_train_compile_script_with_tpu_figures(cli):
    """MaxText's train_compile, unmodified: the program compiled for the TPU slice is reported (its
    num_partitions is thousands of characters into the HLO's first line), as a tpu-v5e program, with the
    memory XLA's memory_analysis() gives for it: the dump alone leaves out the compiler's scratch area, so
    the dumped module is compiled again (--from-dump skips that, and says what it leaves out)."""
    result = cli("run", TRAIN_COMPILE, "--format", "json", "-q")
    assert result.code in (0, 1), result.err
    report = json.loads(result.out)
    [t] = report["targets"]
    assert t["platform"] == "as run (tpu-v5e)" and t["num_devices"] == 8
    assert t["memory"]["budget_bytes"] == 16 * 2**30
    assert t["collectives"] and all(c["source"] for c in t["collectives"])
    m = _direct_compile(MAXTEXT, "tpu-v5e", **MAXTEXT_SMALL)["train_step"].memory_analysis()
    assert (t["memory"]["temp_bytes"], t["memory"]["peak_bytes"]) == (
        m.temp_size_in_bytes,
        m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes)
    # The one line allowed: the reshards under SL105's threshold, counted (they are not findings).
    assert not [w for w in t["warnings"] if "not reported as findings" not in w]

    dump_only = cli("run", TRAIN_COMPILE, "--from-dump", "--format", "json", "-q")
    [d] = json.loads(dump_only.out)["targets"]
    assert d["memory"]["temp_bytes"] < m.temp_size_in_bytes
    assert any("scratch area is not in it" in w for w in d["warnings"])
