"""A fix measured better is still compared with suggest's other single moves of the same value
(analyzer/backend/advice/rival_moves.py): lint and suggest give one recommendation per value (issue 46).

fixtures/scripts/sl103_both_features_split.py: two point clouds with their features split, a cost matrix x @ y.T
contracting them (ott's Sinkhorn, newbie18 F4). SL103's own fix (one cloud on its rows) is measured better than
the program as written, but leaves the other cloud split on its features; suggest's single move takes 'data' off
that one too. The oracle is XLA: each layout compiled here with jax.jit, its memory_analysis() peak.
"""

import json
import os

import jax
import jax.numpy as jnp
import pytest
from hlo_oracle import xla_peak
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.passes.common.sharding_text import pspec_text

SCRIPT = os.path.join("fixtures", "scripts", "sl103_both_features_split.py")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _json(cli, *args):
    result = cli(*args, "--format", "json", "-q", *(["--fail-on", "never"] if args[0] != "suggest" else []))
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


def _spec(sharding):
    return P(*[tuple(axes) if len(axes) > 1 else (axes[0] if axes else None) for axes in sharding])


def test_lints_fix_is_suggests_single_move_and_xla_compiles_it_below_the_rules_own(cli, checking):
    module = script_module(SCRIPT)
    [lint] = _json(cli, "lint", SCRIPT)
    [suggested] = _json(cli, "suggest", SCRIPT)
    [f] = [f for f in lint["findings"] if f["rule"] == "SL103"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f

    # suggest's choice: the arguments it changes, its single move's layout (the same peak).
    changed = {a["path"]: a["suggested"] for a in suggested["arguments"] if a["suggested"] != a["current"]}
    [move] = [v for v in suggested["versions"] if v["name"] == "single move"]
    assert set(changed) == {"x", "y"}, changed
    # lint prints that layout for every argument it changes, the finding's parameter's as its suggested sharding.
    for path, sharding in changed.items():
        assert f"{path} as {pspec_text(sharding)} instead of P(None, 'data')" in f["fix"], (path, f["fix"])
    assert f["suggested_sharding"] == changed[f["parameter"]]
    # The rule's own fix (the parameter's rows over 'data') is said beside it, with what it measured.
    own = f"{f['parameter']} -> P('data'), checked: peak -"
    assert own in f["fix"], f["fix"]

    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    shapes = {"x": (module.N, module.D), "y": (module.M, module.D)}

    def compiled(specs):
        args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, specs.get(name, P(None, "data"))))
                for name, shape in shapes.items()]
        return jax.jit(module.sinkhorn).lower(*args).compile()

    written = xla_peak(compiled({}))
    chosen = xla_peak(compiled({path: _spec(s) for path, s in changed.items()}))
    rules_own = xla_peak(compiled({f["parameter"]: P("data")}))
    assert check["peak_bytes_before"] == written
    assert check["peak_bytes_after"] == chosen == move["peak_bytes"]
    # The printed move is below the rule's own fix, which is itself below the program as written.
    assert chosen < rules_own < written, (chosen, rules_own, written)
