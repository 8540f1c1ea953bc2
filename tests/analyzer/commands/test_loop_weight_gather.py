"""SL102's FSDP fix on the README's first example (issue 46): the layer scan's down projection reads
``params['layers']['down']`` P(None, 'tp', 'fsdp'), whose slice holds ``fsdp`` on its output dimension, against
an activation whose batch is split on ``fsdp``; XLA gathers the 128 MiB activation over fsdp in every layer.
The fix gathers the weight's slice in the layer instead (``with_sharding_constraint`` to P('tp')), and its line
is pasted here into a copy of the example and compiled: XLA's figures are the check's, exactly."""

import os

from conftest import EXAMPLES
from hlo_oracle import collective_bytes_per_step, xla_peak
from main_example_edits import compiled_copy, under_its_mesh
from test_split_activation import linted  # noqa: F401 (the module's fixture: the example linted once for both)

EXAMPLE = os.path.join(EXAMPLES, "fsdp_tp_train_step.py")
DOWN = "params['layers']['down']"
DOWN_LINE = '    return h + jnp.einsum("bsf,fd->bsd", up, w["down"])\n'
PASTE = """down = jax.lax.with_sharding_constraint(w["down"], P('tp'))"""


def test_the_fix_gathers_the_weight_and_xla_measures_it(linted, tmp_path):  # noqa: F811
    [found] = [f for f in linted["findings"] if f["rule"] == "SL102"]
    assert found["source"]["line"] == 31 and found["parameter"] == DOWN
    check = found["fix_check"]
    assert check["verdict"] == "better"
    assert check["change"] == f"{DOWN}'s slice gathered in the loop body at line 31 -> P('tp')"
    assert found["fix"].startswith(f"gather the weight, not the activation: {DOWN} P(None, 'tp', 'fsdp') holds fsdp")
    assert f"add `{PASTE}` before line 31, and read down for w[\"down\"] there" in found["fix"]

    source = open(EXAMPLE).read()
    written = compiled_copy(source, tmp_path)
    # The user's edit: the printed line pasted before line 31, which then reads `down`, the step lowered under
    # its mesh (the PartitionSpec needs it, as the fix says).
    edited = source.replace(DOWN_LINE, f"    {PASTE}\n" + DOWN_LINE.replace('w["down"]', "down"))
    edited = under_its_mesh(edited)
    assert edited.count("with_sharding_constraint") == 1 and "set_mesh" in edited
    fixed = compiled_copy(edited, tmp_path)
    # The check inserted what the pasted line lowers to (the weight's reads and its cotangent constrained):
    # XLA's peak and collective bytes of the pasted program are the check's, to the byte.
    assert check["peak_bytes_before"] == xla_peak(written)
    assert check["peak_bytes_after"] == xla_peak(fixed)
    assert check["collective_bytes_before"] == collective_bytes_per_step(written.as_text())
    assert check["collective_bytes_after"] == collective_bytes_per_step(fixed.as_text())
    # The activation's 128 MiB gather over fsdp, 8x per step, is gone: more than 1 GiB less per step.
    assert collective_bytes_per_step(written.as_text()) - collective_bytes_per_step(fixed.as_text()) > 2**30
    assert "jax.set_mesh(mesh)" in found["fix"]
