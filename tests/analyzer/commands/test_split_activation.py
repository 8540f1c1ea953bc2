"""SL105 where XLA gathers an activation, not an argument (issue 46, the README's first example): the
residual stream of examples/fsdp_tp_train_step.py is left split on ``tp`` by propagation (the matmul by the
mixer's weight produces its output there), and each later matmul that reads the whole model dimension gathers
it. The finding names that matmul and its weight (never a replicated weight that cannot cause it), and its
printed fix is compiled here as the user would write it, with XLA's figures compared to the check's."""

import json
import os
import re

import jax
import pytest
from conftest import EXAMPLES, lint_targets
from hlo_oracle import collective_bytes_per_step, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from main_example_edits import compiled_copy, under_its_mesh
from scripts import script_module

from jax_shard_lint.passes.common.byte_sizes import format_bytes

EXAMPLE = os.path.join(EXAMPLES, "fsdp_tp_train_step.py")
MIX = "params['layers']['mix']"
# The line the example's mixer matmul is on (the split begins there).
MIX_LINE = "    mixed = jnp.einsum(\"bsd,de->bse\", x, w[\"mix\"])\n"


_LINTED: dict = {}


@pytest.fixture
def linted(cli, monkeypatch):
    """``lint --format json`` of the example with its fixes checked, run once for the module's tests."""
    if not _LINTED:
        monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
        [_LINTED["target"]] = lint_targets(cli, EXAMPLE)
    return _LINTED["target"]


def test_the_split_is_named_at_the_matmul_that_makes_it(linted):
    found = [f for f in linted["findings"] if f["rule"] == "SL105"]
    # One cause, one finding, at the line where the split begins: the gathers at lines 28, 30 and 37 are its
    # ops (XLA's all-gathers over tp of f32[4,1024,1024] at those lines: 3 + 3 in the layer scan, 1 after it).
    assert [f["source"]["line"] for f in found] == [28]
    assert found[0]["count"] == 7 and found[0]["bytes"] == (6 * 8 + 1) * 16 * 2**20
    # Each names the mixer's weight, whose output dimension is on tp, not the weight its own matmul multiplies
    # by: params['embed'] is replicated (P()) and cannot split anything.
    assert all(f["parameter"] == MIX for f in found)
    assert not any("params['embed']" in f["message"] for f in found)
    for f in found:
        assert "which propagation leaves split on tp" in f["message"]
        assert f"the matmul by {MIX} P(None, 'fsdp', 'tp') at line 28" in f["message"]
        assert "the gathers at lines 28, 30 and 37 come from this one split" in f["message"]


def test_the_printed_fix_is_the_one_xla_measures_better(linted, tmp_path):
    found = [f for f in linted["findings"] if f["rule"] == "SL105"]
    checks = {json.dumps(f["fix_check"], sort_keys=True) for f in found}
    assert len(checks) == 1  # one cause, one check
    check = found[0]["fix_check"]
    assert check["verdict"] == "better"
    assert check["change"] == f"the output of the matmul by {MIX} at line 28 -> P('fsdp', 'tp')"
    assert found[0]["fix"].startswith(f"constrain the output of the matmul by {MIX} at line 28 with "
                                      "jax.lax.with_sharding_constraint to P('fsdp', 'tp') (checked: ")
    source = open(EXAMPLE).read()
    written = compiled_copy(source, tmp_path)
    # The user's edit: the constraint where the finding says, the step lowered under the mesh it names.
    edited = source.replace(MIX_LINE, "    mixed = jax.lax.with_sharding_constraint(\n"
                            "        jnp.einsum(\"bsd,de->bse\", x, w[\"mix\"]), P(\"fsdp\", \"tp\"))\n")
    edited = under_its_mesh(edited)
    assert edited.count("with_sharding_constraint") == 1 and "set_mesh" in edited
    fixed = compiled_copy(edited, tmp_path)
    assert check["peak_bytes_before"] == xla_peak(written)
    # The check constrains the cotangent too, as the constraint in the source does: the same figures.
    assert check["peak_bytes_after"] == xla_peak(fixed)
    assert xla_peak(fixed) < xla_peak(written)
    assert check["collective_bytes_before"] == collective_bytes_per_step(written.as_text())
    assert check["collective_bytes_after"] == collective_bytes_per_step(fixed.as_text())
    assert collective_bytes_per_step(written.as_text()) - collective_bytes_per_step(fixed.as_text()) > 2**30


def test_the_weight_moved_off_tp_is_said_to_be_worse(linted):
    """The weight's own move (tp dropped from its output dimension) gathers the logits over fsdp instead:
    XLA's peak rises by GiBs; the finding says so beside the fix, with the figure measured here."""
    mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    example = script_module(EXAMPLE)

    def lowered(mix):
        def spec(shape, p, dtype=jax.numpy.float32):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, p))
        params = {"embed": spec((32768, 1024), P()),
                  "layers": {"mix": spec((8, 1024, 1024), mix), "up": spec((8, 1024, 4096), P(None, "fsdp", "tp")),
                             "down": spec((8, 4096, 1024), P(None, "tp", "fsdp"))}}
        tokens = spec((16, 1024), P("fsdp"), jax.numpy.int32)
        return jax.jit(example.train_step).lower(params, {"mu": params, "nu": params}, tokens).compile()

    rise = xla_peak(lowered(P(None, "fsdp", None))) - xla_peak(lowered(P(None, "fsdp", "tp")))
    assert rise > 2 * 2**30
    fix = next(f["fix"] for f in linted["findings"] if f["rule"] == "SL105")
    moved = re.search(r"opt_state\['nu'\]\['layers'\]\['mix'\] -> P\(None, 'fsdp'\): peak \+([\d.]+ GiB)", fix)
    assert moved is not None, fix
    assert moved.group(1) == format_bytes(rise)
    assert fix.endswith("worse")
