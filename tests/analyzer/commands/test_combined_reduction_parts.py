"""A combined all-reduce is attributed value by value. XLA's all-reduce combiner joins a row-parallel
projection's partial sums and a vocabulary-parallel embedding's masked lookup into one tuple all-reduce (as
in transformers' Flax T5, where SL103 once blamed the embedding for the projection's matmul and the sum of
both parts' bytes). The oracle is XLA: the program is compiled here and the combined all-reduce, its two
operands (one a dot by ``w['w_out']``, one the gather fusion that reads ``w['embed']``) and each part's bytes
are read from ``compiled.as_text()`` with regular expressions of the test's own."""

import os
import re
from math import prod

from conftest import FIXTURES, lint_targets
from scripts import script_module

COMBINED = os.path.join(FIXTURES, "scripts", "combined_row_parallel_and_embedding.py")


def _lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}


def _operands(line: str) -> list[str]:
    return re.findall(r"%([\w.\-]+)", line.split(" = ", 1)[1].split("(", 1)[1].split("), ")[0])


def _op_name(line: str) -> str:
    return re.search(r'op_name="([^"]*)"', line).group(1)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def test_each_part_of_a_combined_all_reduce_is_traced_to_its_own_op_and_parameter(cli):
    """XLA's text: one forward all-reduce over two values; the first operand is a dot's result (behind a
    bitcast) by the row-parallel ``w['w_out']``, the second the fusion of the gather that reads ``w['embed']``
    (its table operand is that entry parameter). The tool: one collective of both parts' bytes whose why
    says, part by part with each part's bytes, that the dot's sum closes the w_in/w_out pair and the gather's
    is the vocabulary-parallel lookup of w['embed'], never one part's op with the other's parameter; and no
    SL103 (the 4 MiB combined is 16x w_out's gathered shard, the ratio at which it once fired)."""
    text = script_module(COMBINED).shard_lint_targets()["train_step"].compile().as_text()
    lines = _lines(text)
    [combined] = [n for n, line in lines.items() if re.search(r"= \([^)]*\) all-reduce\(", line)
                  and "transpose(" not in line]
    parts = re.search(r"= \(([^)]*)\) all-reduce\(", lines[combined]).group(1)
    sizes = [4 * prod(int(d) for d in dims.split(",")) for dims in re.findall(r"f32\[([\d,]+)\]", parts)]
    summed, looked_up = _operands(lines[combined])
    assert _op_name(lines[summed]).endswith("dot_general") and _op_name(lines[looked_up]).endswith("gather")
    dot = _operands(lines[summed])[0] if " bitcast(" in lines[summed] else summed
    params = {n: _op_name(line) for n, line in lines.items() if " parameter(" in line and "op_name=\"w" in line}
    assert "w['w_out']" in {params.get(o, "").replace("\\'", "'") for o in _operands(lines[dot])}
    assert params[_operands(lines[looked_up])[0]].replace("\\'", "'") == "w['embed']"
    assert len(sizes) == 2

    (t,) = lint_targets(cli, COMBINED)
    [c] = [c for c in t["collectives"] if c["hlo_name"] == combined]
    assert (c["kind"], c["bytes"], len(c["parts"])) == ("all-reduce", sum(sizes), 2)
    row, lookup = c["why"].split("; ")
    assert f"({_mib(sizes[0])}): the row-parallel half of a tensor-parallel pair" in row
    assert "w['w_out'] P('model')" in row and "w['w_in'] P(None, 'model')" in row and "embed" not in row
    assert f"({_mib(sizes[1])}): a vocabulary-parallel lookup at " in lookup
    assert "w['embed'] P('model') is sharded on its rows" in lookup and "w_out" not in lookup and "matmul" not in lookup
    assert not [f for f in t["findings"] if f["rule"] == "SL103" or f["subject"] == combined]
