"""A message that names what a collective moves names every value of XLA's op (issue 46, newbie15's F5): XLA's
all-to-all of fixtures/scripts/sl105_unexplained_reshard.py's w1 is a 2-tuple, and its combiner joins the step's
gradient all-reduces into one; the bytes beside the text are all of them, so the text names all of them
(``2 values (f32[2048, 1, 8192] x2)``), not one array of half the size. The oracle is XLA's compiled text, read
with the tests' own regular expressions (hlo_oracle): each collective's result tuple, its arrays and bytes."""

import os
import re

from conftest import FIXTURES, lint_targets
from hlo_oracle import _INSTRUCTION, ARRAY, array_bytes
from scripts import script_module

from jax_shard_lint.passes.common.byte_sizes import format_bytes
from jax_shard_lint.passes.common.collective_values import values_text
from jax_shard_lint.passes.models.report import Collective

SCRIPT = os.path.join(FIXTURES, "scripts", "sl105_unexplained_reshard.py")


def _tuples(text: str) -> dict[str, list[str]]:
    """Collective name -> the arrays of its result in XLA's text (``f32[2048, 1, 8192]``), in operand order."""
    return {name: [f"{dtype}[{', '.join(dims.split(','))}]" for dtype, dims in ARRAY.findall(shape)]
            for name, shape, _, start, _ in _INSTRUCTION.findall(text) if not start}


def _said(arrays: list[str]) -> str:
    """How a message lists a tuple's arrays: how many, then each shape (largest first) and how often."""
    if len(arrays) == 1:
        return arrays[0]
    ordered = sorted(arrays, key=lambda a: -array_bytes(a.replace(" ", "")))
    counts = {a: ordered.count(a) for a in ordered}
    return f"{len(arrays)} values (" + ", ".join(a + (f" x{n}" if n > 1 else "") for a, n in counts.items()) + ")"


def test_a_tuple_collectives_message_names_each_of_its_values(cli):
    [target] = lint_targets(cli, SCRIPT, "--target", "contracted")
    text = script_module(SCRIPT).shard_lint_targets()["contracted"].compile().as_text()
    tuples = _tuples(text)
    # The premise, from XLA: the all-to-all SL105 reports is a tuple of two arrays, and so is an all-reduce.
    [all_to_all] = [n for n in tuples if n.startswith("all-to-all")]
    assert len(tuples[all_to_all]) == 2
    assert any(len(a) > 1 for n, a in tuples.items() if n.startswith("all-reduce"))

    [f] = [f for f in target["findings"] if f["rule"] == "SL105" and all_to_all in (f.get("ops") or [f["subject"]])]
    nbytes = sum(array_bytes(a.replace(" ", "")) for a in tuples[all_to_all])
    assert f"all-to-all over model reshards {_said(tuples[all_to_all])} ({format_bytes(nbytes)})," in f["message"], \
        f["message"]
    # Every collective of the report, a combined all-reduce's parts too, is named with XLA's values.
    for c in target["collectives"]:
        name = re.sub(r"-done$", "", c["hlo_name"])
        assert values_text(Collective.model_validate(c)) == _said(tuples[name]), (c["hlo_name"], tuples[name])
