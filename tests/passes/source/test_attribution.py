"""Whose line a frame is, the first-party/third-party settings, scripts that print
while loaded, non-ASCII script paths, and terminal reports at fixed widths."""

import json
import os
import re
import shutil

import pytest
from conftest import EXAMPLES, FIXTURES, golden_dir

from jax_shard_lint.passes.hlo.parser import c_string
from jax_shard_lint.passes.models.report import SourceLocation
from jax_shard_lint.passes.source.frames import CodeOwnership, library_relative

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def own(**kw):
    return CodeOwnership(stdlib=(STDLIB,), root="/work/proj", user_roots=("/work/proj/scripts",), **kw)


@pytest.mark.parametrize("path, users", [
    ("/work/proj/scripts/train.py", True),
    ("/work/proj/mypkg/model.py", True),
    (f"{SITE}/flax/nnx/nn/linear.py", False),
    (f"{SITE}/optax/_src/transform.py", False),
    ("/usr/lib/python3/dist-packages/numpy/core.py", False),
    (f"{STDLIB}/functools.py", False),
    ("/home/me/src/flax/flax/linen/linear.py", False),  # a source checkout of a known library
    ("/work/proj/scripts/.venv/lib/python3.11/site-packages/equinox/_module.py", False),
    ("<stdin>", True),
    ("<frozen importlib._bootstrap>", False),
])
def test_default_ownership(path, users):
    assert own().is_user(path) is users


def test_first_and_third_party_override():
    o = own(first_party=("mypkg", "vendored/keep.py"), third_party=("mypkg.generated", "scripts/vendor/"))
    assert o.is_user(f"{SITE}/mypkg/layers.py")  # installed, but named first-party
    assert not o.is_user(f"{SITE}/mypkg/generated/ops.py")  # third-party wins
    assert not o.is_user("/work/proj/scripts/vendor/lib.py")
    assert o.is_user("/work/proj/vendored/keep.py")


def test_attribution_picks_the_innermost_user_frame():
    stack = [SourceLocation(file=f"{SITE}/flax/nnx/nn/linear.py", line=422, function="Linear.__call__"),
             SourceLocation(file="/work/proj/scripts/model.py", line=41, function="Block.__call__"),
             SourceLocation(file="/work/proj/scripts/train.py", line=9, function="loss_fn")]
    source, via = own().attribute(stack)
    assert (source.file, source.line) == ("/work/proj/scripts/model.py", 41)
    assert (via.file, via.line) == (f"{SITE}/flax/nnx/nn/linear.py", 422)
    source, via = own().attribute(stack[:1])  # no frame is the user's: say so
    assert source is None and via.line == 422
    assert library_relative(via.file) == "flax/nnx/nn/linear.py"


def test_code_with_no_file_is_the_library_that_runs_it():
    """jax-cfd's ForcedNavierStokes2D, a dataclass: its generated __init__ (file ``<string>``), called by jax_cfd,
    builds the solver's filter. Its ops were shown at ``<string>:8``, a line no user wrote; they are at the
    user's line that constructs the equation, via the library."""
    lib = SourceLocation(file=f"{SITE}/jax_cfd/spectral/utils.py", line=133, function="brick_wall_filter_2d")
    generated = SourceLocation(file="<string>", line=8, function="__init__")
    caller = SourceLocation(file=f"{SITE}/jax_cfd/spectral/equations.py", line=150, function="make")
    user = SourceLocation(file="/work/proj/scripts/flow.py", line=21, function="make_step")
    source, via = own().attribute([lib, generated, caller, user])
    assert (source.file, source.line, via.line) == ("/work/proj/scripts/flow.py", 21, 133)
    # The user's own code with no file (python -c, <stdin>, their exec) stays theirs.
    source, via = own().attribute([lib, generated, user])
    assert (source.file, source.line, via.line) == ("<string>", 8, 133)
    source, via = own().attribute([lib, SourceLocation(file="<stdin>", line=3, function="<module>")])
    assert (source.file, source.line) == ("<stdin>", 3)


def test_xla_file_names_with_octal_escapes():
    assert c_string(r'"/tmp/caf\303\251/na\303\257ve.py"') == "/tmp/café/naïve.py"


def test_config_first_party_is_read(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.jax-shard-lint]\nfirst-party = 5\n')
    shutil.copy(os.path.join(FIXTURES, "scripts", "sl101_replicating_collective.py"), tmp_path / "s.py")
    shutil.copy(os.path.join(FIXTURES, "scripts", "_mesh.py"), tmp_path / "_mesh.py")
    result = cli("lint", str(tmp_path / "s.py"), "-q")
    assert result.code == 2
    assert result.err.strip().endswith("first-party must be a list of module names or paths")


NOISY = """
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
print("x" * 1_000_000)

def shard_lint_targets(mesh_devices=None):
    print("lowering...")
    mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=NamedSharding(mesh, P("d")))
    return {"sum": jax.jit(lambda x: x.sum(0)).lower(x)}
"""


def test_json_stays_valid_when_the_script_prints(cli, tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    result = cli("lint", str(script), "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    report = json.loads(result.out)
    assert report["targets"][0]["name"] == "sum"
    assert "x" * 1000 in result.err and "lowering..." in result.err


def test_non_ascii_script_path(cli, tmp_path):
    folder = tmp_path / "café"
    folder.mkdir()
    shutil.copy(os.path.join(FIXTURES, "scripts", "sl101_replicating_collective.py"), folder / "naïve.py")
    shutil.copy(os.path.join(FIXTURES, "scripts", "_mesh.py"), folder / "_mesh.py")
    result = cli("lint", str(folder / "naïve.py"), "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    files = {f["source"]["file"] for t in report["targets"] for f in t["findings"] if f["source"]}
    assert files and all(f.endswith("café/naïve.py") for f in files)


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_report_fits_its_width(cli, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    result = cli("lint", os.path.join(EXAMPLES, "fsdp_tp_train_step.py"), "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert max(len(line) for line in lines) <= width
    assert not any(re.search(r"│ …\s*│", line) for line in lines)  # no column collapsed to an ellipsis
    golden = os.path.join(golden_dir(), f"fsdp_terminal_{width}.txt")
    with open(golden) as f:
        assert result.out == f.read(), f"{golden} differs (python3 tests/golden/generate.py regenerates it)"
