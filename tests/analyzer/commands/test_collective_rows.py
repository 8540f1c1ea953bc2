"""The collectives table on a program whose every layer runs through one line (issue 46, GPT-J): rows
sharing a source line are told apart by the module and op XLA names them by, and a combined (tuple)
all-reduce says how many arrays it moves, its bytes the sum of its operands in XLA's compiled HLO."""

import json
import os
import re

import pytest
from conftest import FIXTURES
from hlo_oracle import array_bytes, compiled_collectives
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "layers_one_line.py")


@pytest.fixture(scope="module")
def compiled_text():
    return script_module(SCRIPT).shard_lint_targets()["train_step"].compile().as_text()


def _op_names(text):
    """HLO instruction name -> the op_name XLA's metadata gives it."""
    return dict(re.findall(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?metadata=\{op_name=\"([^\"]*)\"", text, re.M))


def _table_rows(out):
    table = out.split("Collectives (")[1].split("└")[0]
    rows, cells = [], None
    for line in table.splitlines():
        if not line.startswith("│"):
            continue
        parts = [c.strip() for c in line.strip("│").split("│")]
        if parts[0]:  # a new row; a blank kind cell continues the row above
            cells = parts
            rows.append(cells)
        else:
            cells[:] = [f"{a}{b}" if a.endswith("/") or not b else f"{a} {b}".strip() for a, b in zip(cells, parts)]
    return rows


@pytest.mark.parametrize("columns", [100, 130])
def test_rows_from_one_line_are_told_apart_by_their_op(cli, monkeypatch, compiled_text, columns):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    monkeypatch.setenv("COLUMNS", str(columns))
    result = cli("lint", SCRIPT, "--no-fix-check", "--fail-on", "never")
    assert result.code == 0, result.err
    assert max(len(line) for line in result.out.splitlines()) <= columns
    rows = _table_rows(result.out)
    header = [c.strip() for c in result.out.split("Collectives (")[1].splitlines()[2].strip("┃").split("┃")]
    assert header[:7] == ["kind", "bytes", "count", "time", "axes", "source", "op"], header
    # Every row comes from one line of the script; before, nothing else on the row told them apart.
    assert len({r[5] for r in rows}) == 1 and len(rows) == len(compiled_collectives(compiled_text, 8))
    assert len({(r[0], r[1], r[4], r[6]) for r in rows}) == len(rows), rows
    # Each row's op is one XLA names a collective by (its scope and op, the jitted step's name taken off).
    names = _op_names(compiled_text)
    hlo_ops = [re.sub(r"(?:transpose\()?jvp\((\w+)\)\)?", r"\1", names[n].split("/", 1)[1])
               for n in compiled_collectives(compiled_text, 8)]
    for r in rows:
        op = r[6].removesuffix(" (backward)")
        if op.endswith(" ops"):  # a combined one: how many ops XLA's op name joins
            assert any(h.startswith("(") and h.count(":") + 1 == int(op.split()[0]) for h in hlo_ops), hlo_ops
        else:
            assert op in hlo_ops, (op, hlo_ops)


def test_a_tuple_all_reduce_shows_all_its_arrays_with_xlas_bytes(cli, compiled_text):
    [t] = json.loads(cli("lint", SCRIPT, "--no-fix-check", "--format", "json", "--fail-on", "never").out)["targets"]
    tuples = {n: s for n, s in re.findall(r"^\s*(?:ROOT )?%([\w.\-]+) = (\([^=]*\)) all-reduce\(", compiled_text, re.M)}
    assert tuples, "XLA combined no all-reduce"
    for name, shape in tuples.items():
        [c] = [c for c in t["collectives"] if c["hlo_name"] == name]
        operands = re.findall(r"\b\w+\[[\d,]*\]", shape)
        assert len(c["parts"]) == len(operands) > 1
        assert c["bytes"] == array_bytes(shape) == sum(p["bytes"] for p in c["parts"])  # every operand, not the first
    from jax_shard_lint.passes.models.report import Collective
    from jax_shard_lint.reports.common.tensor_text import collective_op_text, collective_shape_text

    [combined] = [Collective.model_validate(c) for c in t["collectives"] if c["hlo_name"] in tuples]
    assert collective_shape_text(combined) == f"{len(combined.parts)} arrays (largest f32[256,128])"
    assert collective_op_text(combined) == f"{len(combined.parts)} ops (backward)"
