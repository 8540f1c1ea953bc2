"""A Mixture-of-Experts step written as google-research/vmoe writes it (vmoe_dispatch_step.py): its dispatch
and combine are all-to-alls between two with_sharding_constraints the program states, the program's own
traffic as a shard_map's all_to_all is (intent ``constraint``), not resharding nobody asked for: before,
each was intent ``reshard`` and an SL105 warning whose fix was the constraint the code already has. The
oracle is XLA: the compiled text's all-to-alls, told apart by their op_name (vmoe's reshape between the
constraints, or the expert einsum that reads a weight on the wrong dimension), and their bytes."""

import json
import os
import re
from types import SimpleNamespace

import jax
import pytest
from ci_deps import require
from hlo_oracle import compiled_collectives
from scripts import script_module

STEP = os.path.join(os.path.dirname(__file__), "vmoe_dispatch_step.py")
# Under each all-to-all's bytes (1.25 MiB dispatch, 1 MiB weight move): every reshard among them is reported.
THRESHOLD = ("--threshold", "unexplained-reshard-bytes=512KiB")


@pytest.fixture(scope="module")
def runs():
    """Each layout's step compiled by XLA in this run (``compiled[layout]``: the text) and linted
    (``linted[layout]``: the target), once for the module's tests: each layout is the oracle and the report
    of two or three of them."""
    require("optax", "optax is not installed (the [test] extra)")
    compiled: dict[str, str] = {}
    linted: dict[str, dict] = {}

    def text(layout: str) -> str:
        if layout not in compiled:
            compiled[layout] = script_module(STEP).shard_lint_targets(layout=layout)[layout].compile().as_text()
        return compiled[layout]

    def target(cli, layout: str) -> dict:
        if layout not in linted:
            linted[layout] = _lint(cli, layout)
        return linted[layout]

    return SimpleNamespace(text=text, target=target)


def _xla_all_to_alls(runs, layout: str) -> dict[str, tuple[str, int]]:
    """HLO name -> (the op JAX emitted it for: the op_name's last part, bytes per device), from XLA."""
    text = runs.text(layout)
    out = {}
    for name, (kind, size, _) in compiled_collectives(text, 8).items():
        if kind == "all-to-all":
            op_name = re.search(rf"%{re.escape(name)} = [^\n]*op_name=\"([^\"]*)\"", text).group(1)
            out[name] = (op_name.rsplit("/", 1)[-1], size)
    return out


def _lint(cli, layout: str) -> dict:
    result = cli("lint", STEP, "--set", f"layout={layout}", *THRESHOLD, "--no-fix-check", "--format", "json", "-q",
                 "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    [target] = json.loads(result.out)["targets"]
    return target


@pytest.mark.parametrize("layout", ["expert_parallel", "dmodel_sharded"])
def test_vmoe_dispatch_all_to_alls_are_the_programs_own(cli, runs, layout):
    xla = _xla_all_to_alls(runs, layout)
    dispatch = {name: size for name, (op, size) in xla.items() if op == "reshape"}
    assert len(dispatch) == 3, xla  # dispatch, combine, and the combine's transpose (x takes no gradient)
    target = runs.target(cli, layout)
    by_name = {c["hlo_name"]: c for c in target["collectives"]}
    for name, size in dispatch.items():
        assert (by_name[name]["intent"], by_name[name]["bytes"]) == ("constraint", size), by_name[name]
    reported = {op for f in target["findings"] if f["rule"] == "SL105" for op in [f["subject"], *f["ops"]]}
    assert not reported & set(dispatch)


def _weight_moves(cli, runs) -> tuple[dict[str, int], list[dict]]:
    """The mistake's own all-to-alls from XLA (op_name: the expert einsums that read wi and wo on their expert
    dimension, forward, and their gradients' transposes), each checked ``reshard`` at XLA's bytes; the SL105s."""
    xla = _xla_all_to_alls(runs, "dmodel_sharded")
    moves = {name: size for name, (op, size) in xla.items() if op == "dot_general"}
    assert len(moves) == 4, xla
    target = runs.target(cli, "dmodel_sharded")
    by_name = {c["hlo_name"]: c for c in target["collectives"]}
    assert {(n, by_name[n]["intent"], by_name[n]["bytes"]) for n in moves} == {(n, "reshard", s) for n, s in
                                                                             moves.items()}
    return moves, [f for f in target["findings"] if f["rule"] == "SL105"]


def test_d_model_sharded_experts_still_warn_once_per_move(cli, runs):
    moves, findings = _weight_moves(cli, runs)
    ops = [op for f in findings for op in {f["subject"], *f["ops"]}]
    assert sorted(ops) == sorted(moves)


@pytest.mark.xfail(jax.__version_info__ >= (0, 12), strict=True, reason=(
    "moe14 F4: under JAX 0.12 (and for --platform h100 or tpu-v5p under 0.10) the gradients' moves back to the "
    "weights' layout for optax's update are their own SL105 at the optax line, naming no argument"))
def test_d_model_sharded_experts_warnings_name_the_weights(cli, runs):
    _, findings = _weight_moves(cli, runs)
    assert {f["parameter"] for f in findings} == {"params['wi']", "params['wo']"}


def test_combined_gradient_all_reduce_parts_are_at_their_einsums(cli, runs):
    """XLA combines wi's and wo's gradient all-reduces into one; each operand keeps its einsum's metadata
    (op_name transpose(jvp(EnD,EDH->EnH))/dot_general, ...EnH,EHD->EnD...) on the bitcast in front of a dot
    CPU left without any. Each part is at its einsum's line (before: wo's at receive()'s reshape, where
    the sums' input comes from)."""
    text = runs.text("expert_parallel")
    source = open(STEP).read().splitlines()

    def op_name(name: str) -> str:
        return re.search(rf"%{re.escape(name)} = [^\n]*op_name=\"([^\"]*)\"", text).group(1)

    [(name, operands)] = [(m.group(1), m.group(2)) for m in re.finditer(
        r"%([\w.\-]+) = \([^)]*\) all-reduce\(([^)]*)\)", text) if "EnH,EHD->EnD" in op_name(m.group(1))]
    lines = []
    for operand in re.findall(r"%([\w.\-]+)", operands):
        spec = re.search(r"\((\w+,\w+->\w+)\)\)/dot_general$", op_name(operand)).group(1)
        [line] = [k + 1 for k, text_line in enumerate(source) if f'"{spec}"' in text_line]
        lines.append(line)
    assert len(lines) == 2 and lines[0] != lines[1]
    [c] = [c for c in runs.target(cli, "expert_parallel")["collectives"] if c["hlo_name"] == name]
    assert [p["source"]["line"] for p in c["parts"]] == lines
