"""``suggest`` on pylcm's backward-induction grid-search kernel (examples/lcm_grid_search_kernel.py):
the value array sharded on the wealth axis its interpolation reads is moved to the discrete
preference-type axis, as the library's maintainers did by hand; the kernel is lowered with keyword
arguments and a dict of value arrays, and the text that places them pastes. Oracles: XLA's compiled
program and memory_analysis() of the pasted and the written layouts, compiled here. And the
single-move baseline: what suggest chooses is never worse than the best single move it compiled."""

import json
import os

import jax
import jax.numpy as jnp
import pytest
from conftest import EXAMPLES
from hlo_oracle import xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend.advice.moves import single_moves
from jax_shard_lint.passes.models.report import TensorInfo

KERNEL = os.path.join("examples", "lcm_grid_search_kernel.py")
VALUE = os.path.join("examples", "value_function_step.py")
V = "next_regime_to_V_arr['working']"
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")


def _suggest(cli, *args):
    result = cli("suggest", *args, "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


def _version(report, name):
    return next(v for v in report["versions"] if v["name"] == name)


def _kernel_module():
    return script_module(os.path.join(EXAMPLES, "lcm_grid_search_kernel.py"))



def _real(info, sharding):
    """A real array for an abstract keyword argument (values do not matter: only shardings are compiled)."""
    return jax.device_put(jnp.ones(info.shape, jax_adapter.arg_info_dtype(info)), sharding)


@pytest.fixture(scope="module")
def kernel_report():
    from conftest import ROOT

    from jax_shard_lint.analyzer.cli.main import run_command

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = run_command(["suggest", KERNEL, "--target", "V_on_wealth", "--format", "json", "-q"])
    finally:
        os.chdir(cwd)
    assert code == 0
    [r] = json.loads(out.getvalue())["targets"]
    return r


def test_suggest_moves_the_value_array_to_the_preference_type_axis(kernel_report):
    r = kernel_report
    v = next(a for a in r["arguments"] if a["path"] == V)
    assert v["current"] == [[], ["d"]]  # the wealth axis the interpolation reads
    assert v["suggested"] == [["d"], []]  # the discrete preference-type axis
    assert r["chosen"] != "written"
    chosen, written = _version(r, r["chosen"]), _version(r, "written")
    assert chosen["collective_bytes"] == 0 < written["collective_bytes"]
    assert chosen["peak_bytes"] < written["peak_bytes"]


def test_the_placement_text_pastes_and_xla_compiles_it_without_collectives_at_a_lower_peak(kernel_report):
    """jit takes no in_shardings with keyword arguments: the text places the inputs by keyword (the dict of
    value arrays included); jit compiled on them has exactly the suggested shardings, no collective, and a
    lower peak than the written layout, both compiled here."""
    r = kernel_report
    module = _kernel_module()
    written = module.shard_lint_targets()["V_on_wealth"]
    mesh = jax_adapter.lowered_mesh(written)
    _, kwargs = written.args_info
    assert r["in_shardings_text"] is None and r["placement_text"] is not None
    names = sorted(kwargs)
    assert r["placement_text"].startswith(f"{', '.join(names)} = jax.device_put((")
    scope = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh,
             **{k: jax.tree.map(lambda i: _real(i, NamedSharding(mesh, P())), kwargs[k]) for k in names}}
    exec(r["placement_text"], scope)
    out_shardings = eval(r["out_shardings_text"].removeprefix("out_shardings="), scope)
    pasted = jax.jit(module.max_Q_over_a, out_shardings=out_shardings).lower(**{k: scope[k] for k in names})
    compiled = pasted.compile()
    by_path = {a["path"]: a for a in r["arguments"]}
    got = compiled.input_shardings[1]
    for path, sharding in [(V, got["next_regime_to_V_arr"]["working"]), ("wealth", got["wealth"]),
                           ("pref_type", got["pref_type"])]:
        a = by_path[path]
        want = NamedSharding(mesh, P(*[tuple(x) if x else None for x in a["suggested"]]))
        assert sharding.is_equivalent_to(want, len(a["shape"])), (path, sharding)
    text = compiled.as_text()
    assert not any(f" {op}(" in text or f" {op}-start(" in text for op in COLLECTIVES)
    written_compiled = written.compile()
    assert " all-gather(" in written_compiled.as_text() or " all-gather-start(" in written_compiled.as_text()
    assert xla_peak(compiled) < xla_peak(written_compiled)


def test_suggest_is_never_worse_than_the_best_single_move(kernel_report, cli):
    for r in [kernel_report, *_suggest(cli, VALUE, "--target", "sharded_on_grid")]:
        move = _version(r, "single move")
        chosen = _version(r, r["chosen"])
        assert move["error"] is None
        # best_version: the fastest, or one within 1% of it with a peak at least 10% lower.
        assert chosen["estimated_seconds"] <= move["estimated_seconds"] * 1.01
        assert chosen["estimated_seconds"] < move["estimated_seconds"] or chosen["peak_bytes"] <= move["peak_bytes"]


def _info(index, path, shape, sharding, dtype="f32"):
    return TensorInfo(index=index, path=path, shape=list(shape), dtype=dtype, sharding=sharding, bytes=0,
                      per_device_bytes=0)


def test_single_moves_move_one_axis_within_an_argument_and_between_arguments():
    inputs = (_info(0, "V", (8, 64), [[], ["d"]]), _info(1, "wealth", (64,), [["d"]]),
              _info(2, "beta", (), []))
    moves = single_moves(inputs, {0: [[], ["d"]], 1: [["d"]]}, ("d",), {"d": 8}, set())
    pins = [m.pins for m in moves]
    assert {0: [["d"], []], 1: [[]], 2: []} in pins  # d onto V's first dimension, off wealth
    assert {0: [["d"], []], 1: [["d"]], 2: []} in pins  # d moved within V only
    assert {0: [[], []], 1: [["d"]], 2: []} in pins  # V replicated
    assert all(m.pins[0] != [[], ["d"]] or m.pins[1] != [["d"]] for m in moves)  # never the written layout
    # A fixed argument never moves; a dimension the axis does not divide is never offered.
    fixed = single_moves(inputs, {0: [[], ["d"]], 1: [["d"]]}, ("d",), {"d": 16}, {"V"})
    assert all(m.pins[0] == [[], ["d"]] for m in fixed)


def test_single_moves_move_a_dimensions_group_of_axes_whole():
    # x P(('data', 'model')): moving one axis at a time never reaches P(None, ('data', 'model')), lint's SL206 fix.
    inputs = (_info(0, "x", (16, 8192), [["data", "model"], []]),)
    sizes = {"data": 4, "model": 2}
    moves = single_moves(inputs, {0: [["data", "model"], []]}, ("data", "model"), sizes, set())
    pins = [m.pins[0] for m in moves]
    assert [[], ["data", "model"]] in pins  # the group whole, in its written order
    assert [[], []] in pins  # the group dropped
    assert "x: P(('data', 'model')) -> P(None, ('data', 'model'))" in [m.description for m in moves]
    # A dimension the group does not divide is never offered; a fixed axis stays where it is written.
    assert all(p != [["data", "model"], []] for p in pins)
    narrow = single_moves((_info(0, "x", (16, 6), [["data", "model"], []]),), {0: [["data", "model"], []]},
                          ("data", "model"), sizes, set())
    assert [[], ["data", "model"]] not in [m.pins[0] for m in narrow]
    held = single_moves(inputs, {0: [["data", "model"], []]}, ("data",), sizes, set())
    assert all("model" in p[0] for p in (m.pins[0] for m in held))
