"""Shardy's passes, run through jaxlib's MLIR bindings on clones of a module:
the op sharding rules our propagation reads, and Shardy's own propagation that
it is held against."""

from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy

from .axes import Axes, label, merge_adjacent
from .stablehlo_module import dim_axes, read_dims

POPULATE_RULES = "builtin.module(func.func(sdy-populate-op-sharding-rules))"
SHARDY_PROPAGATION = "builtin.module(sdy-propagation-pipeline)"
_CONSTANTS = ("stablehlo.constant", "sdy.constant")
# Shardy's export turns a constraint it could not satisfy in place into a reshard.
_ALIASES = {"sdy.sharding_constraint": "sdy.reshard"}


def clone(module: ir.Module) -> ir.Module:
    """A copy in the same context, source locations kept."""
    text = module.operation.get_asm(enable_debug_info=True)
    with module.context:
        return ir.Module.parse(text)


def run_pipeline(module: ir.Module, pipeline: str) -> ir.Module:
    out = clone(module)
    with out.context:
        passmanager.PassManager.parse(pipeline).run(out.operation)
    return out


def with_sharding_rules(module: ir.Module) -> ir.Module:
    return run_pipeline(module, POPULATE_RULES)


def shardy_propagated(module: ir.Module) -> ir.Module:
    return run_pipeline(module, SHARDY_PROPAGATION)


def axes_of(attr: ir.Attribute, axis_sizes: dict[str, int], rank: int) -> tuple[Axes, ...]:
    dims = [merge_adjacent(dim_axes(d, axis_sizes)) for d in read_dims(sdy.TensorShardingAttr(attr))]
    return tuple(dims) + ((),) * (rank - len(dims))


def labels(dims: tuple[Axes, ...], axis_sizes: dict[str, int]) -> list[list[str]]:
    return [[label(r, axis_sizes) for r in d] for d in dims]


@dataclass(frozen=True)
class PairedValue:
    """A value of our module and the sharding Shardy gave the same value."""

    ours: ir.Value
    shardy: tuple[Axes, ...]


def _ops(block, constant_values: set | None = None):
    """Ops in walk order, leaving out constant subexpressions (constants, iotas and
    region-free ops computed only from them): Shardy duplicates those per use."""
    consts = set() if constant_values is None else constant_values
    for op in block.operations:
        operands = list(op.operands)
        if op.name in _CONSTANTS or op.name == "stablehlo.iota" or (
            operands and not op.regions and all(v in consts for v in operands)
        ):
            consts.update(op.results)
            continue
        yield op
        for region in op.regions:
            for inner in region.blocks:
                yield from _ops(inner, consts)


def _result_shardings(op) -> list:
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


def pair_values(ours: ir.Module, theirs: ir.Module, axis_sizes: dict[str, int]) -> tuple[list[PairedValue], list[str]]:
    """Walk both modules in the same order (constants aside: Shardy splits and
    dedups them) and pair each op result with Shardy's sharding of it; values
    Shardy left unannotated are unsharded. Returns the pairs and the places where
    the two modules' structure diverged (nothing after them is compared)."""

    def funcs(m):
        return {
            ir.StringAttr(op.operation.attributes["sym_name"]).value: op
            for op in m.body.operations if op.operation.name == "func.func"
        }

    pairs: list[PairedValue] = []
    diverged: list[str] = []
    theirs_funcs = funcs(theirs)
    for name, fn in funcs(ours).items():
        other = theirs_funcs.get(name)
        if other is None:
            diverged.append(f"@{name}: not in Shardy's output")
            continue
        attrs = list(other.arg_attrs) if "arg_attrs" in other.operation.attributes else []
        for i, arg in enumerate(fn.regions[0].blocks[0].arguments):
            rank = len(ir.RankedTensorType(arg.type).shape) if isinstance(arg.type, ir.RankedTensorType) else 0
            a = ir.DictAttr(attrs[i]) if i < len(attrs) else None
            dims = axes_of(a["sdy.sharding"], axis_sizes, rank) if a is not None and "sdy.sharding" in a else ((),) * rank
            pairs.append(PairedValue(arg, dims))
        for a, b in zip(_ops(fn.regions[0].blocks[0]), _ops(other.regions[0].blocks[0])):
            if _ALIASES.get(a.name, a.name) != _ALIASES.get(b.name, b.name) or len(a.results) != len(b.results):
                diverged.append(f"@{name}: {a.name} vs {b.name}")
                break
            shardings = _result_shardings(b)
            for i, r in enumerate(a.results):
                if not isinstance(r.type, ir.RankedTensorType):
                    continue
                rank = len(ir.RankedTensorType(r.type).shape)
                dims = axes_of(shardings[i], axis_sizes, rank) if i < len(shardings) else ((),) * rank
                pairs.append(PairedValue(r, dims))
    return pairs, diverged
