"""Shardy's passes, run through jaxlib's MLIR bindings on clones of a module:
the op sharding rules our propagation reads, and Shardy's own propagation that
it is held against."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy

from ..common.axes import Axes, label, merge_adjacent
from ..models.errors import ShardyRejected
from ..stablehlo.module import dim_axes, functions, read_dims

POPULATE_RULES = "builtin.module(func.func(sdy-populate-op-sharding-rules))"
SHARDY_PROPAGATION = "builtin.module(sdy-propagation-pipeline)"


def clone(module: ir.Module) -> ir.Module:
    """A copy in the same context, source locations kept."""
    text = module.operation.get_asm(enable_debug_info=True)
    with module.context:
        return ir.Module.parse(text)


def _first_diagnostic(error: Exception) -> str:
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith("error:")), lines[-1] if lines else type(error).__name__)
    # 'error: "-":23:8: message': the module was parsed from text, so "-" names nothing.
    return re.sub(r'^error:\s*(?:"[^"]*":(\d+):\d+:\s*)?', lambda m: f"line {m.group(1)}: " if m.group(1) else "",
                  line)


def check_runs_in_shardy(module: ir.Module) -> None:
    """Module shapes that Shardy's pipeline does not diagnose but aborts the process
    on (an ``SDY_CHECK``): refused here, before the pipeline runs."""
    funcs = functions(module)
    if funcs and all(_is_private(f) for f in funcs.values()):
        # Its symbol DCE drops every private function, then getMainFuncOrDie finds no main.
        raise ShardyRejected("every function is private (Shardy's pipeline drops private functions, then needs "
                             "a public @main)")
    if len(funcs) > 1 and "main" not in funcs:
        # getMainFuncOrDie: with several functions Shardy's pipeline needs one named main.
        raise ShardyRejected(f"{len(funcs)} functions and none named main (Shardy's pipeline needs @main "
                             "when a module has several functions)")


def _is_private(func) -> bool:
    attributes = func.operation.attributes
    visibility = attributes["sym_visibility"] if "sym_visibility" in attributes else None
    return visibility is not None and ir.StringAttr(visibility).value == "private"


def run_pipeline(module: ir.Module, pipeline: str) -> ir.Module:
    out = clone(module)
    with out.context:
        try:
            passmanager.PassManager.parse(pipeline).run(out.operation)
        except ir.MLIRError as e:
            raise ShardyRejected(_first_diagnostic(e)) from e
    return out


def with_sharding_rules(module: ir.Module) -> ir.Module:
    return run_pipeline(module, POPULATE_RULES)


def shardy_propagated(module: ir.Module) -> ir.Module:
    check_runs_in_shardy(module)
    return run_pipeline(module, SHARDY_PROPAGATION)


def axes_of(attr: ir.Attribute, axis_sizes: dict[str, int], rank: int) -> tuple[Axes, ...]:
    dims = [merge_adjacent(dim_axes(d, axis_sizes)) for d in read_dims(sdy.TensorShardingAttr(attr))]
    return tuple(dims) + ((),) * (rank - len(dims))


def labels(dims: tuple[Axes, ...], axis_sizes: dict[str, int]) -> list[list[str]]:
    return [[label(r, axis_sizes) for r in d] for d in dims]


# Each op of the module Shardy propagates carries its position in our walk, so its
# result is paired with ours by identity, however Shardy restructures around it.
OP_ID = "jax_shard_lint.op_id"


def walk_ops(block: ir.Block) -> Iterator[ir.OpView]:
    """Every op under a block, pre-order, regions in order: the one walk both sides number."""
    for op in block.operations:
        yield op
        for region in op.regions:
            for inner in region.blocks:
                yield from walk_ops(inner)


def call_sites(funcs: dict) -> dict[str, list[ir.OpView]]:
    """The ``func.call`` ops of ``funcs`` (``stablehlo.module.functions``), by the callee's name: where a walk back
    from a function's argument goes on in its callers."""
    callers: dict[str, list[ir.OpView]] = {}
    for fn in funcs.values():
        for o in walk_ops(fn.regions[0].blocks[0]):
            if o.operation.name == "func.call":
                callers.setdefault(ir.FlatSymbolRefAttr(o.attributes["callee"]).value, []).append(o)
    return callers


def tagged_clone(module: ir.Module) -> ir.Module:
    """A copy whose every op inside a function carries ``OP_ID``: its index in
    ``walk_ops`` over the functions in module order."""
    out = clone(module)
    with out.context:
        i64 = ir.IntegerType.get_signless(64)
        index = 0
        for fn in functions(out).values():
            for op in walk_ops(fn.regions[0].blocks[0]):
                op.operation.attributes[OP_ID] = ir.IntegerAttr.get(i64, index)
                index += 1
    return out


def result_shardings(op) -> list:
    """Shardy's sharding of each result: the op's ``sdy.sharding``, or for ops that
    state their own (a reshard, a shard_map's out_specs) that attribute."""
    attrs = op.attributes
    if "sdy.sharding" in attrs:
        return list(sdy.TensorShardingPerValueAttr(attrs["sdy.sharding"]).shardings)
    if op.name in ("sdy.reshard", "sdy.sharding_constraint") and "sharding" in attrs:
        return [attrs["sharding"]]
    if op.name == "sdy.manual_computation" and "out_shardings" in attrs:
        return list(sdy.TensorShardingPerValueAttr(attrs["out_shardings"]).shardings)
    return []


def _rank(value) -> int | None:
    return len(ir.RankedTensorType(value.type).shape) if isinstance(value.type, ir.RankedTensorType) else None


@dataclass(frozen=True)
class PairedValues:
    """Our values with the sharding Shardy gave the same value (by op identity;
    a value Shardy left unannotated is unsharded), and why the rest were not paired."""

    shardings: dict  # ir.Value of our module -> Shardy's axes per dimension
    not_paired: dict  # ir.Value -> reason


def pair_values(ours: ir.Module, theirs: ir.Module, axis_sizes_of) -> PairedValues:
    """Pair our module's values with Shardy's output of its ``tagged_clone``.
    ``axis_sizes_of(attr)`` gives the axis sizes of the mesh a sharding names."""
    by_id: dict[int, list] = {}
    for fn in functions(theirs).values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            if OP_ID in op.attributes:
                by_id.setdefault(ir.IntegerAttr(op.attributes[OP_ID]).value, []).append(op)

    def axes(attr, rank):
        return axes_of(attr, axis_sizes_of(attr), rank)

    shardings: dict = {}
    not_paired: dict = {}
    theirs_funcs = functions(theirs)
    ours_funcs = functions(ours)
    # Shardy's export merges clones whose shardings are equal (``bar`` and ``bar_0``
    # become one): a function missing from its output is the one our call's copy calls.
    renamed: dict[str, str] = {}
    index = 0
    for fn in ours_funcs.values():
        for op in walk_ops(fn.regions[0].blocks[0]):
            if op.name == "func.call":
                for copy in by_id.get(index, []):
                    if copy.name == "func.call":
                        renamed.setdefault(ir.FlatSymbolRefAttr(op.attributes["callee"]).value,
                                           ir.FlatSymbolRefAttr(copy.attributes["callee"]).value)
            index += 1
    index = 0
    for name, fn in ours_funcs.items():
        other = theirs_funcs.get(name)
        if other is None and name in renamed:
            other = theirs_funcs.get(renamed[name])
        attrs = list(other.arg_attrs) if other is not None and "arg_attrs" in other.operation.attributes else []
        for i, arg in enumerate(fn.regions[0].blocks[0].arguments):
            rank = _rank(arg)
            if rank is None:
                continue
            if other is None:
                not_paired[arg] = "its function is not in Shardy's output"
                continue
            a = ir.DictAttr(attrs[i]) if i < len(attrs) else None
            shardings[arg] = axes(a["sdy.sharding"], rank) if a is not None and "sdy.sharding" in a else ((),) * rank
        for op in walk_ops(fn.regions[0].blocks[0]):
            copies = by_id.get(index, [])
            index += 1
            ranked = [(i, r, _rank(r)) for i, r in enumerate(op.results) if _rank(r) is not None]
            if not ranked:
                continue
            if not copies:
                for _, r, _ in ranked:
                    not_paired[r] = "Shardy replaced the op"
                continue
            if any(len(c.results) != len(op.results) for c in copies):
                for _, r, _ in ranked:
                    not_paired[r] = "Shardy changed the op's results"
                continue
            for i, r, rank in ranked:
                seen = set()
                for c in copies:
                    found = result_shardings(c)
                    seen.add(axes(found[i], rank) if i < len(found) else ((),) * rank)
                if len(seen) == 1:
                    shardings[r] = seen.pop()
                else:
                    not_paired[r] = "Shardy's copies of the op differ"
    return PairedValues(shardings, not_paired)
