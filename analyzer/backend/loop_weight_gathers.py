"""SL102's fix where a loop body's matmul reads a parameter's slice that holds the mesh axis the matmul's other
operand (the activation) is split on: XLA's partitioner gathers the activation over that axis on every
iteration (the main example's ``params['layers']['down']`` P(None, 'tp', 'fsdp') against a batch split on
``fsdp``: a 128 MiB gather of the activation, 8x per step, where the weight's slice is 8 MiB). What an FSDP
layer does instead is gather the weight, in the layer: ``w = with_sharding_constraint(w, P('tp', None))``, the
slice's spec without that axis, at the line that reads it.

The fix is compiled as the user would paste it: a constraint on the slice where each matmul at the line reads it
and on the weight's cotangent there (what the constraint's transpose states), inserted in the program as
written (propagation/loop_weight_reads.py finds them), and printed, with the line to paste, only when measured
better; otherwise the finding says it was tried and what it cost.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxlib.mlir import ir

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.fix_check import FixVerdict
from ...passes.models.report import Collective, Finding, TargetReport, TensorInfo
from ...passes.pipelines.catalogue import LOOP_WEIGHT_GATHER_FIXES
from ...passes.pipelines.entry import entry_signature
from ...passes.pipelines.fix_checks import FIX_CHECKS
from ...passes.pipelines.stablehlo_edits import clone, module_ops, weight_reads_at
from ..adapter import jax_adapter
from ..context.config import Settings
from ..supervision import isolation
from .candidate_compile import compiled_beside_written
from .fix_verdicts import baseline, cost_text, for_finding, measured_check, not_offered_text, rematerializations
from .sharding_edits import sdy_sharding_text


@dataclass(frozen=True)
class WeightGather:
    """The weight's gather one finding's check compiles: where its constraints go and what it says."""

    parameter: TensorInfo
    gathered: tuple[str, ...]  # the mesh axes the weight's slice is gathered over
    spec: list[list[str]]  # the slice's sharding without them
    reads: Any  # LoopWeightReads: the matmul operands and the cotangents the constraint states
    change: str  # what the check names it


def _axis(label: str) -> str:
    return label.split(":")[0]


def _largest_gather(f: Finding, report: TargetReport) -> Collective | None:
    names = set(f.ops or [f.subject or ""])
    gathers = [c for c in report.collectives if c.hlo_name in names and c.kind == "all-gather"]
    return max(gathers, key=lambda c: (c.bytes * c.count, c.hlo_name), default=None)


def _reported(f: Finding) -> bool:
    """A finding of the rules with the ``loop_weight_gather`` trait (SL102) whose fix no stage before this one
    compiled, and not the user's constraint's (its edit is the stated-layout stage's)."""
    return f.rule in LOOP_WEIGHT_GATHER_FIXES and f.fix_check is None and f.constraint is None


def weight_gather(f: Finding, report: TargetReport, module: ir.Module, settings: Settings) -> WeightGather | str:
    """The weight's gather for an SL102 finding that names a parameter a matmul at its line reads (its loop
    slice), where the group's largest all-gather runs over an axis that slice holds; otherwise why there is
    none to compile."""
    line = f.source.line if f.source else 0
    parameter = next((t for t in report.inputs if t.path == f.parameter), None)
    if parameter is None or parameter.sharding is None or f.source is None:
        return ("no argument or with_sharding_constraint of the program is found behind these collectives, so "
                "the program states no layout of theirs to change and compile")
    largest = _largest_gather(f, report)
    if largest is None:
        return f"none of them is an all-gather, which gathering {f.parameter} in the loop body could replace"
    reads = weight_reads_at(module, f.source, parameter.index, tuple(parameter.shape),
                            settings.pass_config.ownership)
    if reads is None:
        return f"no matmul at line {line} reads {f.parameter} or its loop slice, so there is no weight to gather there"
    sliced = (parameter.sharding + [[] for _ in parameter.shape])[reads.stacked:len(parameter.shape)]
    gathered = tuple(a for a in dict.fromkeys(_axis(x) for x in largest.mesh_axes)
                     if any(_axis(x) == a for dim in sliced for x in dim))
    if not gathered:
        return (f"the largest all-gather runs over {', '.join(largest.mesh_axes)}, which {f.parameter} "
                f"{pspec_text(parameter.sharding)} does not hold, so gathering that weight would not replace it")
    spec = [[x for x in dim if _axis(x) not in gathered] for dim in sliced]
    where = f"in the loop body at line {line}" if reads.stacked else f"at line {line}"
    return WeightGather(parameter, gathered, spec, reads,
                        f"{f.parameter}'s slice gathered {where} -> {pspec_text(spec)}")


def with_weight_gathered(module: ir.Module, gather: WeightGather, mesh_name: str) -> str:
    """The module's text with the weight constrained to ``gather.spec`` where each matmul at the line reads it,
    and its cotangent there: what ``with_sharding_constraint`` on the weight at that line lowers to."""
    edited = clone(module)
    ops = module_ops(edited)
    with edited.context:
        attribute = ir.Attribute.parse(sdy_sharding_text(gather.spec, mesh_name))
        for read in gather.reads.reads:
            op = ops[read.op_index].operation
            value = op.operands[read.operand]
            with ir.InsertionPoint(op), op.location:
                constraint = ir.Operation.create("sdy.sharding_constraint", results=[value.type], operands=[value],
                                                 attributes={"sharding": attribute})
            op.operands[read.operand] = constraint.result
        for index in gather.reads.cotangents:
            op = ops[index].operation
            value = op.results[0]
            with ir.InsertionPoint.after(op), op.location:
                constraint = ir.Operation.create("sdy.sharding_constraint", results=[value.type], operands=[value],
                                                 attributes={"sharding": attribute})
            value.replace_all_uses_except(constraint.result, constraint)
    return str(edited.operation.get_asm(enable_debug_info=True))


def _weight_expression(f: Finding, key: str) -> str | None:
    """The expression the user's line reads the weight by (``w["down"]``, ``self.w``, ``w``): the one that names
    the parameter's last key; None where the line names none, or cannot be read alone."""
    if f.source is None:
        return None
    try:
        with open(f.source.file, encoding="utf-8") as source:
            line = source.read().splitlines()[f.source.line - 1].strip()
        tree = ast.parse(line)
    except (OSError, IndexError, SyntaxError, ValueError):
        return None  # a line that is part of a longer statement: the finding names the weight by its path
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == key
                or isinstance(node, ast.Attribute) and node.attr == key
                or isinstance(node, ast.Name) and node.id == key):
            return ast.get_source_segment(line, node) or ast.unparse(node)
    return None


def paste_text(f: Finding, gather: WeightGather) -> str:
    """The line to paste before the user's line, and what to read there."""
    key = gather.parameter.path.rstrip("]").rsplit("[", 1)[-1].strip("'\"")
    name = key if key.isidentifier() else "weight"
    spec = pspec_text(gather.spec)
    expression = _weight_expression(f, key)
    line = f.source.line if f.source else 0
    context = (f"(a PartitionSpec needs the mesh in context, jax.set_mesh(mesh); else pass "
               f"NamedSharding(mesh, {spec}))")
    if expression is None:
        return (f"constrain the layer's slice of {gather.parameter.path} with jax.lax.with_sharding_constraint to "
                f"{spec} before line {line} reads it {context}")
    read = "" if expression == name else f", and read {name} for {expression} there"
    return f"add `{name} = jax.lax.with_sharding_constraint({expression}, {spec})` before line {line}{read} {context}"


def _fix_text(f: Finding, gather: WeightGather, largest: Collective) -> str:
    axes = " and ".join(gather.gathered)
    return (f"gather the weight, not the activation: {gather.parameter.path} {pspec_text(gather.parameter.sharding)} "
            f"holds {axes}, the axis the matmul's other operand is split on, so XLA gathers that operand "
            f"({largest.dtype}[{','.join(map(str, largest.shape))}], {format_bytes(largest.bytes)} a time, "
            f"{largest.count}x per step) over {axes}; gather the layer's slice of the weight over {axes} in the loop "
            f"body instead (FSDP's per-layer weight all-gather): {paste_text(f, gather)}")


def check_loop_weight_gathers(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                              progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each SL102 finding's weight gather compiled: printed as its fix, with the line to
    paste, where measured better; otherwise the finding says it was tried and what it cost, or, where there
    is no weight to gather, that its advice was not compiled, and why."""
    if not any(_reported(f) for f in report.findings):
        return report
    module = jax_adapter.parse_stablehlo(text)
    found = {k: weight_gather(f, report, module, settings) for k, f in enumerate(report.findings) if _reported(f)}
    findings = list(report.findings)
    for k, why in found.items():
        if isinstance(why, str):
            findings[k] = findings[k].model_copy(update={"fix": f"{findings[k].fix} (advice, not compiled: {why})"})
    planned = {k: g for k, g in found.items() if isinstance(g, WeightGather)}
    if not planned:
        return report.model_copy(update={"findings": findings})
    isolation.phase(where, "compiling the loop weight gathers to check them")
    sig = entry_signature(module, FIX_CHECKS)
    unique = {g.change: g for g in planned.values()}
    before, compiled = compiled_beside_written(
        report, text, [(c, with_weight_gathered(module, g, sig.mesh_name or "mesh")) for c, g in unique.items()],
        sig, settings, where, devices, progress)
    base, written = baseline(before, sig), rematerializations(before)
    checks = {change: measured_check(change, result, base, sig, written) for change, result in zip(unique, compiled)}
    for k, gather in planned.items():
        f = findings[k]
        check = for_finding(f, checks[gather.change])
        largest = _largest_gather(f, report)
        if check.verdict is FixVerdict.better and largest is not None:
            fix = f"{_fix_text(f, gather, largest)} (checked: {cost_text(check)})"
        else:
            fix = (f"{f.fix}; gathering the weight instead ({gather.change}, FSDP's per-layer weight all-gather) was "
                   f"tried, compiled and {not_offered_text(check)}")
        findings[k] = f.model_copy(update={"fix_check": check, "fix": fix})
    return report.model_copy(update={"findings": findings})
