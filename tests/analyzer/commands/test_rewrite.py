"""rewrite: pin output shardings in StableHLO, recompile, compare, and run both
versions on the 8 virtual CPU devices."""

import json
import os
import re

import jax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.analyzer.commands.rewrite.command import parse_spec
from jax_shard_lint.analyzer.errors import ShardLintInputError

SL201 = os.path.join("fixtures", "scripts", "sl201_output_sharding_mismatch.py")
VALUE = os.path.join("examples", "value_function_step.py")
MESH = {"data": 4, "model": 2}


def run_json(cli, *args):
    result = cli("rewrite", *args, "--format", "json")
    assert result.code == 0, result.err
    return json.loads(result.out)["targets"]


def test_state_output_is_pinned_to_its_input_and_validated(cli):
    [t] = run_json(cli, SL201, "--target", "unpinned", "--validate", "--repeats", "2")
    assert [(a["path"], a["before"], a["after"]) for a in t["out_shardings"]] == [
        ("result[0]['w']", [["model"], []], [["data"], ["model"]])]
    assert t["after"]["outputs"][0]["sharding"] == [["data"], ["model"]]
    # The donated state can now be reused in place: XLA aliases it.
    assert t["before"]["alias_bytes"] == 0 and t["after"]["alias_bytes"] == 512 * 512 * 4 // 8
    assert t["after"]["peak_bytes"] < t["before"]["peak_bytes"]
    # Built from the real output pytree, each leaf's sharding spelled (x.sharding of an abstract input is
    # None: test_rewrite_paste.py); dicts and tuples written out, as lint and check print them.
    assert t["python_fix"] == "out_shardings=({'w': NamedSharding(mesh, P('data', 'model'))}, NamedSharding(mesh, P()))"
    v = t["validation"]
    assert v["ran"] and v["backend"] == "cpu" and v["outputs_match"] and v["shardings_match"]
    assert v["time_before_s"] > 0 and v["time_after_s"] > 0
    assert v["measured_peak_before_bytes"] is None  # the CPU backend has no memory_stats()


def test_pinning_cannot_remove_a_read_along_the_sharded_axis(cli):
    [t] = run_json(cli, VALUE, "--target", "sharded_on_grid", "--set", "grid_points=1024", "--set", "states=64",
                   "--validate", "--repeats", "1")
    assert t["out_shardings"][0]["after"] == [[], ["x"]]
    assert t["after"]["collective_bytes"] < t["before"]["collective_bytes"]
    assert any("shard another axis" in r for r in t["remaining"])
    assert t["validation"]["outputs_match"] and t["validation"]["shardings_match"]


def test_explicit_out_spec_and_index(cli):
    [t] = run_json(cli, SL201, "--target", "unpinned", "--out", "result[0]['w']=P(None, 'data')", "--out", "1=P()")
    assert [(a["index"], a["after"]) for a in t["out_shardings"]] == [(0, [[], ["data"]]), (1, [])]
    assert t["after"]["outputs"][0]["sharding"] == [[], ["data"]]


def test_nothing_to_rewrite(cli):
    [t] = run_json(cli, SL201, "--target", "pinned")
    assert t["out_shardings"] == [] and t["python_fix"] is None
    assert t["verdict"].startswith("Nothing to rewrite")


def test_nothing_to_rewrite_where_no_output_is_an_input_returned(cli, tmp_path):
    """A solver's result (a cost and a potential) is no input returned: the verdict does not claim that outputs
    have their inputs' shardings (newbie18 F10, ott's Sinkhorn)."""
    script = tmp_path / "solve.py"
    script.write_text(
        "import jax, jax.numpy as jnp\nfrom jax.sharding import NamedSharding, PartitionSpec as P\n\n"
        "def solve(x, y):\n    c = x @ y.T\n    return c.sum(), c.max(axis=1)\n\n"
        "def shard_lint_targets():\n"
        "    mesh = jax.make_mesh((8,), ('data',), axis_types=(jax.sharding.AxisType.Auto,))\n"
        "    s = jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=NamedSharding(mesh, P('data')))\n"
        "    return {'solve': jax.jit(solve).lower(s, s)}\n")
    [t] = run_json(cli, str(script))
    assert t["out_shardings"] == [] and t["python_fix"] is None
    assert t["verdict"].startswith("Nothing to rewrite: no output is an input the step returns")


def test_rewrite_a_mlir_fixture(cli):
    [t] = run_json(cli, os.path.join("fixtures", "hlo", "cpu_scan.mlir"), "--out", "1=P('data', 'model')")
    assert t["after"]["outputs"][1]["sharding"] == [["data"], ["model"]]


@pytest.mark.parametrize("spec, rank, error", [
    ("P('nope')", 2, "no mesh axis 'nope' (mesh: data, model)"),
    ("P('data', 'data')", 2, "axis 'data' is used twice"),
    ("P(None, None, 'data')", 2, "has 3 entries but the output has rank 2"),
    ("data", 2, "expected a PartitionSpec like P(None, 'x'), got 'data'"),
])
def test_bad_specs(spec, rank, error):
    with pytest.raises(ShardLintInputError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(spec, MESH, rank, "--out")


def test_good_specs():
    assert parse_spec("P(None, ('data', 'model'))", MESH, 2) if False else True
    assert parse_spec("P(None, ('data', 'model'))", MESH, 2, "--out") == [[], ["data", "model"]]
    assert parse_spec("None", MESH, 2, "--out") == [[], []]


def test_unknown_output_is_one_line(cli):
    result = cli("rewrite", SL201, "--target", "unpinned", "--out", "result[7]=P()")
    assert result.code == 2
    assert result.err.strip() == ("jax-shard-lint: error: --out: no output 'result[7]' "
                                  "(outputs: result[0]['w'], result[1])")


def test_script_declared_out_shardings(cli, tmp_path):
    script = tmp_path / "declared.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {os.path.abspath(os.path.join('fixtures', 'scripts'))!r})\n"
        + "import jax\nfrom _mesh import P, mesh, spec\n\n"
        "def step(w):\n    return w.T @ w\n\n"
        "def shard_lint_targets():\n"
        "    m = mesh()\n"
        "    return {'step': jax.jit(step).lower(spec(m, (512, 512), P('data', 'model')))}\n\n"
        "def shard_lint_out_shardings():\n"
        "    return {'step': {'result': P('model', 'data')}}\n"
    )
    [t] = run_json(cli, str(script))
    assert [(a["path"], a["after"], a["why"]) for a in t["out_shardings"]] == [
        ("result", [["model"], ["data"]], "declared by the script")]
    assert t["after"]["outputs"][0]["sharding"] == [["model"], ["data"]]


ADAM = """
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def step(params, mu, nu, x):
    g = jax.grad(lambda p: jnp.tanh(x @ p["w"]).sum())(params)
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, mu, g)
    nu = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, nu, g)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, mu, nu)
    return params, mu, nu


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    s = lambda shape, p: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, p))
    w = {"w": s((256, 512), P("data", "model"))}
    return {"adam": jax.jit(step).lower(w, w, w, s((64, 256), P("data")))}
"""


def _validation(cli, script, text):
    """``rewrite --validate`` on a script written from ``text``: its validation block."""
    script.write_text(text)
    result = cli("rewrite", str(script), "--validate", "--repeats", "1", "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"][0]["validation"]


def test_validate_an_adam_step_counts_nans_instead_of_failing(cli, tmp_path):
    # Standard-normal inputs make nu negative and sqrt(nu) NaN in both versions, at the same places.
    v = _validation(cli, tmp_path / "adam.py", ADAM)
    assert v["ran"] and v["outputs_match"] and not v["mismatches"]
    assert v["nan_values"] and v["nan_values"][0].startswith("result[0]['w']: ")


ADAM_INPUTS = ADAM + '''

def shard_lint_inputs():
    import numpy as np
    rng = np.random.default_rng(1)
    w = {"w": rng.standard_normal((256, 512), dtype=np.float32)}
    nu = {"w": np.abs(rng.standard_normal((256, 512), dtype=np.float32))}  # a second moment is never negative
    return {"adam": (w, w, nu, rng.standard_normal((64, 256), dtype=np.float32))}
'''


def test_validate_with_the_scripts_own_inputs(cli, tmp_path):
    script = tmp_path / "adam_inputs.py"
    v = _validation(cli, script, ADAM_INPUTS)
    assert v["inputs"] == "shard_lint_inputs" and v["outputs_match"] and v["nan_values"] == []
    script.write_text(ADAM_INPUTS.replace("(64, 256), dtype", "(64, 255), dtype"))
    result = cli("rewrite", str(script), "--validate", "--repeats", "1", "-q")
    assert result.code == 2
    assert result.err.strip().endswith("shard_lint_inputs() for 'adam': x has shape [64, 255], the program takes "
                                       "[64, 256]"), result.err


DONATED_SCRIPT = '''import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def step(w, x):
    return w - 0.1 * jnp.tanh(x.T @ (x @ w)), (x @ w).sum()


def inputs(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    w = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    x = jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    return mesh, w, x


def shard_lint_targets(mesh_devices=None):
    _, w, x = inputs(mesh_devices)
    return {"step": jax.jit(step, donate_argnums=0).lower(w, x)}
'''


def test_a_pinned_output_that_outgrows_its_donated_input_says_the_donation_is_lost(cli, tmp_path):
    """Pinning a donated state output to a larger per-device layout: XLA drops the alias (JAX's own
    compile of the same jit with that out_shardings agrees), and the report says why."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    script = tmp_path / "donated.py"
    script.write_text(DONATED_SCRIPT)
    [t] = run_json(cli, str(script), "--out", "result[0]=P()")
    [lost] = [r for r in t["remaining"] if r.startswith("donation:")]
    assert "w is donated" in lost and "4.0 MiB per device where w is 2.0 MiB" in lost

    module = script_module(str(script))
    mesh, w, x = module.inputs()
    written = jax.jit(module.step, donate_argnums=0).lower(w, x).compile().memory_analysis()
    with pytest.warns(UserWarning, match="donated buffers were not usable"):  # JAX says so too
        pinned = jax.jit(module.step, donate_argnums=0, out_shardings=(NamedSharding(mesh, P()),
                                                                       NamedSharding(mesh, P()))
                         ).lower(w, x).compile().memory_analysis()
    assert t["before"]["alias_bytes"] == written.alias_size_in_bytes > 0
    assert t["after"]["alias_bytes"] == pinned.alias_size_in_bytes == 0


def test_the_gathers_the_pins_ask_for_are_one_paragraph_naming_the_pin(cli):
    """Four replicated state values the step computes sharded over 'model', pinned back to P(): XLA gathers each
    to return it as pinned. Those gathers are the pins' own cost, said once with their count (XLA's: the
    all-gathers the pinned program has beyond the program as written), not four "still runs ... shard another
    axis" paragraphs: no op reads along another axis there."""
    script = os.path.join("fixtures", "scripts", "pinned_outputs_gathered.py")
    [t] = run_json(cli, script)
    assert len(t["out_shardings"]) == 4 and all(not any(a["after"]) for a in t["out_shardings"])
    module = script_module(script)
    mesh, state, x = module.inputs()
    step = module.make_step(mesh)
    written = jax.jit(step).lower(state, x).compile().as_text()
    pinned = jax.jit(step, out_shardings=NamedSharding(mesh, P())).lower(state, x).compile().as_text()
    added = _all_gathers(pinned) - _all_gathers(written)
    assert added == 4
    [line] = [r for r in t["remaining"] if "inserted to meet the pinned out_shardings" in r]
    assert f"pinned_outputs_gathered.py:34: {added} all-gathers over model (" in line, line
    assert "the rewrite pins them to P() (result['layers'][0]['b'], " in line and "and 1 more)" in line
    assert not any("shard another axis" in r for r in t["remaining"])


def _all_gathers(hlo_text: str) -> int:
    """XLA's all-gather instructions (an async pair counted once, by its start)."""
    return len(re.findall(r"= \S+ all-gather(?:-start)?\(", hlo_text))
