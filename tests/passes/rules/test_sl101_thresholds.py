"""SL101's thresholds at their boundary: a collective of exactly the threshold's bytes is reported, one
byte more is not. The bytes are the all-gather's per-device result in the program XLA compiles here
(compiled.as_text()), not the tool's figure. Kills '>=' turned into '>' in either criterion."""

import re

import jax
import jax.numpy as jnp
import pytest
from conftest import lint_targets
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

_SCRIPT = (
    "import jax, jax.numpy as jnp\n"
    "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
    "def shard_lint_targets():\n"
    "    m = jax.make_mesh((8,), ('x',), axis_types=(AxisType.Auto,))\n"
    "    s = jax.ShapeDtypeStruct((2048, 512), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
    "    return {'f': jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(s)}\n"
)
_NEVER = "1TiB"


def _gathered_bytes() -> int:
    """The per-device result of the one all-gather XLA compiles the program to."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((2048, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    text = jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(s).compile().as_text()
    gathers = re.findall(r"= f32\[(\d+),(\d+)\]\{[\d,]*\} all-gather(?:-start)?\(", text)
    assert len(gathers) == 1, gathers
    rows, cols = map(int, gathers[0])
    assert (rows, cols) == (2048, 512)  # the whole array on every device: the whole-array criterion applies
    return rows * cols * 4


@pytest.mark.parametrize("option, other", [
    ("replicating-collective-bytes", "whole-array-gather-min-bytes"),
    ("whole-array-gather-min-bytes", "replicating-collective-bytes"),
])
def test_sl101_fires_at_its_threshold_exactly(cli, tmp_path, option, other):
    script = tmp_path / "gather.py"
    script.write_text(_SCRIPT)
    nbytes = _gathered_bytes()

    def fired(threshold: int) -> bool:
        targets = lint_targets(cli, str(script), "--threshold", f"{option}={threshold}B",
                               "--threshold", f"{other}={_NEVER}",
                               "--threshold", f"replicating-collective-min-bytes={_NEVER}")
        return any(f["rule"] == "SL101" for f in targets[0]["findings"])

    assert fired(nbytes)
    assert not fired(nbytes + 1)


def test_sl101_message_figures_are_xlas(cli, tmp_path):
    # The message's bytes, shape and share of the peak, against the compiled text and memory_analysis().
    script = tmp_path / "gather.py"
    script.write_text(_SCRIPT)
    nbytes = _gathered_bytes()
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((2048, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    m = jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(s).compile().memory_analysis()
    peak = m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
    targets = lint_targets(cli, str(script), "--threshold", f"replicating-collective-bytes={nbytes}B")
    [finding] = [f for f in targets[0]["findings"] if f["rule"] == "SL101"]
    mib = lambda n: f"{n / 1024**2:,.1f} MiB"  # noqa: E731
    assert f"rebuilds the whole array f32[2048, 512] ({mib(nbytes)}) on every device" in finding["message"]
    assert f"({100 * nbytes / peak:.0f}% of the {mib(peak)} peak)" in finding["message"]


def _peak_bytes() -> int:
    """XLA's per-device peak of the program: memory_analysis() less the donated (aliased) bytes."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((2048, 512), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    m = jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(s).compile().memory_analysis()
    return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes


def test_sl101_peak_fraction_fires_at_its_share_of_xlas_peak(cli, tmp_path):
    # Kills the share computed as fraction / peak rather than fraction x peak, and '>=' turned into '>'
    # on the share's floor: the other criteria are out of reach, the share brackets the gather's bytes
    # over XLA's peak, and with a share of 0 the floor alone decides, at its exact byte.
    script = tmp_path / "gather.py"
    script.write_text(_SCRIPT)
    nbytes, peak = _gathered_bytes(), _peak_bytes()
    assert 0 < nbytes < peak

    def fired(fraction: float, floor: int) -> bool:
        targets = lint_targets(cli, str(script), "--threshold", f"replicating-collective-peak-fraction={fraction!r}",
                               "--threshold", f"replicating-collective-min-bytes={floor}B",
                               "--threshold", f"replicating-collective-bytes={_NEVER}",
                               "--threshold", f"whole-array-gather-min-bytes={_NEVER}")
        return any(f["rule"] == "SL101" for f in targets[0]["findings"])

    assert fired(nbytes / peak * (1 - 1e-9), 1)
    assert not fired(nbytes / peak * (1 + 1e-6), 1)
    assert fired(0.0, nbytes)
    assert not fired(0.0, nbytes + 1)


_LOOP_SCRIPT = (
    "import jax, jax.numpy as jnp\n"
    "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
    "def shard_lint_targets():\n"
    "    m = jax.make_mesh((8,), ('x',), axis_types=(AxisType.Auto,))\n"
    "    s = jax.ShapeDtypeStruct((2048, 512), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
    "    step = lambda a: jax.lax.fori_loop(0, 2, lambda i, h: jnp.cumsum(h, axis=0) * 0.5, a)\n"
    "    return {'f': jax.jit(step).lower(s)}\n"
)


@pytest.mark.parametrize("script_text, loop", [(_SCRIPT, False), (_LOOP_SCRIPT, True)], ids=["once", "loop"])
def test_sl101_counts_runs_per_step_as_xlas_loop_does(cli, tmp_path, script_text, loop):
    # Kills the finding's bytes per step taken as bytes + runs (not bytes x runs) and the "Nx per step"
    # clause printed for a collective that runs once (or missing for one that runs twice): the gather's
    # bytes and runs per step are read from the compiled text (the loop's known_trip_count).
    from hlo_oracle import collectives_per_step

    script = tmp_path / "gather.py"
    script.write_text(script_text)
    scope = {}
    exec(script_text, scope)
    text = scope["shard_lint_targets"]()["f"].compile().as_text()
    gathers = {name: v for name, v in collectives_per_step(text, 8).items() if v[0] == "all-gather"}
    assert len(gathers) == 1, gathers
    [(name, (_, nbytes, group, runs))] = gathers.items()
    assert (group, runs > 1) == (8, loop)
    targets = lint_targets(cli, str(script), "--threshold", f"replicating-collective-bytes={nbytes}B")
    [finding] = [f for f in targets[0]["findings"] if f["rule"] == "SL101"]
    assert finding["bytes"] == nbytes * runs
    assert (f", {runs}x per step" in finding["message"]) == loop


_AFTER_A_LARGER_ALL_TO_ALL = (
    "import jax, jax.numpy as jnp\n"
    "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P\n"
    "def shard_lint_targets():\n"
    "    m = jax.make_mesh((8,), ('x',), axis_types=(AxisType.Auto,))\n"
    "    big = jax.ShapeDtypeStruct((8192, 512), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
    "    small = jax.ShapeDtypeStruct((1024, 256), jnp.float32, sharding=NamedSharding(m, P('x')))\n"
    "    f = lambda a, b: (jax.lax.with_sharding_constraint(a * 2, NamedSharding(m, P(None, 'x'))),\n"
    "                      jnp.cumsum(b, axis=0))\n"
    "    return {'f': jax.jit(f).lower(big, small)}\n"
)


def test_sl101_reports_a_gather_listed_after_a_collective_it_does_not_judge(cli, tmp_path):
    # Kills the loop over collectives stopped (not continued) at the first kind SL101 leaves alone:
    # the all-to-all XLA compiles for the reshard moves more bytes than the gather, so it is listed first.
    from hlo_oracle import compiled_collectives

    script = tmp_path / "two.py"
    script.write_text(_AFTER_A_LARGER_ALL_TO_ALL)
    scope = {}
    exec(_AFTER_A_LARGER_ALL_TO_ALL, scope)
    compiled = compiled_collectives(scope["shard_lint_targets"]()["f"].compile().as_text(), 8)
    kinds = {kind: (name, nbytes) for name, (kind, nbytes, _) in compiled.items()}
    assert set(kinds) == {"all-gather", "all-to-all"}, compiled
    gather, nbytes = kinds["all-gather"]
    assert kinds["all-to-all"][1] > nbytes
    targets = lint_targets(cli, str(script), "--threshold", f"replicating-collective-bytes={nbytes}B")
    assert [f["subject"] for f in targets[0]["findings"] if f["rule"] == "SL101"] == [gather]
