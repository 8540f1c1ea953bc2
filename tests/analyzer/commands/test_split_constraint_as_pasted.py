"""SL105's constraint candidates compile what the user would paste (issue 46): a ``with_sharding_constraint``
written on the output of the matmul where the split begins constrains that value and, through autodiff, its
cotangent in the backward pass. On examples/fsdp_tp_train_step.py (line 28, the mixer's matmul) each candidate
the fix check compiles is compared with the example's source with the constraint pasted at that line, both
compiled by XLA here: every memory_analysis() figure and the collectives' bytes per step are the same. Before
the cotangent was constrained too, P('fsdp') measured peak +8 B and traffic -1.0 GiB in lint's check, and the
pasted edit peak +192 MiB."""

import json
import os

import pytest
from conftest import EXAMPLES, lint_targets
from hlo_oracle import collective_bytes_per_step, xla_peak
from main_example_edits import compiled_copy, under_its_mesh
from scripts import script_module

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend.sharding_edits import with_entry_shardings
from jax_shard_lint.analyzer.backend.split_activation_fixes import inserted_constraint
from jax_shard_lint.passes.common.sharding_text import pspec_text
from jax_shard_lint.passes.models.report import Finding

EXAMPLE = os.path.join(EXAMPLES, "fsdp_tp_train_step.py")
MIX_LINE = "    mixed = jnp.einsum(\"bsd,de->bse\", x, w[\"mix\"])\n"


@pytest.fixture
def split_finding(cli, monkeypatch):
    """The example's one SL105 finding, ``lint --format json`` with its fixes checked."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    [target] = lint_targets(cli, EXAMPLE)
    [found] = [f for f in target["findings"] if f["rule"] == "SL105"]
    return Finding.model_validate(found)


def _pasted(spec: list[list[str]], tmp_path):
    """The example with the constraint written at the matmul's line, as the fix says, lowered under its mesh."""
    source = open(EXAMPLE).read()
    args = ", ".join(repr(d[0]) if len(d) == 1 else repr(tuple(d)) if d else "None" for d in spec)
    edited = source.replace(MIX_LINE, f"    mixed = jax.lax.with_sharding_constraint(jnp.einsum(\"bsd,de->bse\", x, "
                                      f"w[\"mix\"]), P({args}))\n")
    edited = under_its_mesh(edited)
    assert edited.count("with_sharding_constraint") == 1 and "set_mesh" in edited
    return compiled_copy(edited, tmp_path)


def _figures(memory: dict[str, int], hlo_text: str) -> dict[str, int]:
    per_step = collective_bytes_per_step(hlo_text)
    return {**{k: memory[k] for k in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")},
            "collective_bytes": per_step}


def _xla_figures(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    return _figures({"argument_bytes": m.argument_size_in_bytes, "output_bytes": m.output_size_in_bytes,
                     "temp_bytes": m.temp_size_in_bytes, "alias_bytes": m.alias_size_in_bytes}, compiled.as_text())


def test_each_constraint_candidate_is_the_constraint_pasted_at_its_line(split_finding, tmp_path):
    f = split_finding
    assert f.split_origin is not None and f.split_origin.line == 28
    constraints = [c for c in f.candidates if inserted_constraint(f, c) is not None]
    assert [pspec_text(c.sharding) for c in constraints] == ["P('fsdp')", "P('fsdp', 'tp')"]
    lowered = script_module(EXAMPLE).shard_lint_targets()["train_step"]
    module = jax_adapter.parse_stablehlo(jax_adapter.stablehlo_text(lowered))
    for c in constraints:
        change, _, inserted = inserted_constraint(f, c)
        text = with_entry_shardings(module, {}, "mesh", inserted=inserted)
        checked = jax_adapter.compile_stablehlo_text(text, 8, with_reports=False)
        pasted = _pasted(c.sharding, tmp_path)
        assert _figures(checked.memory, checked.hlo_text) == _xla_figures(pasted), change
        if f.fix_check is not None and f.fix_check.change == change:  # the printed fix's figures are the pasted's
            assert f.fix_check.peak_bytes_after == xla_peak(pasted)
            assert f.fix_check.collective_bytes_after == _xla_figures(pasted)["collective_bytes"]
    assert f.fix_check is not None and f.fix_check.change in {inserted_constraint(f, c)[0] for c in constraints}
    assert json.loads(f.model_dump_json())["split_origin"]["line"] == 28
