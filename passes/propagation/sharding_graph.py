"""The graph sharding propagation runs on, built from a StableHLO module whose
ops carry Shardy's ``sdy.sharding_rule`` (``sdy-populate-op-sharding-rules``).

Tensors are the SSA values (function and region arguments, op results). Steps
are either an op with its factor rule, or a data-flow edge: an identity over
tensors that must agree (a while loop's operand, region arguments, yielded value
and result; a call's operand and the callee's argument; a constraint's operand
and result). Seeds are the shardings the program states: function arguments
and results, ``sdy.sharding_constraint``s, ``sdy.manual_computation``
boundaries and ``sdy.sharding`` attributes already on ops.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.shapes import mlir_dtype_to_hlo
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import (
    attribution_of_location,
    dim_axes,
    functions,
    main_mesh,
    mesh_of_sharding,
    op_name_of_location,
    read_dims,
    read_meshes,
    source_of_location,
)
from .call_graph import call_sites
from .explicit_collectives import KINDS as EXPLICIT_KINDS
from .explicit_collectives import read_explicit
from .graph import FactorRule, ShardingGraph, Step, Tensor
from .windows import window_of

# The graph's parts are graph.py's: their users import them from there.
__all__ = ["build_graph"]


def _rule(attr: ir.Attribute) -> FactorRule:
    r = sdy.OpShardingRuleAttr(attr)

    def maps(mappings):
        return tuple(
            tuple(tuple(int(f) for f in sdy.DimMappingAttr(d).factor_indices)
                  for d in sdy.TensorMappingAttr(t).dim_mappings)
            for t in mappings
        )

    return FactorRule(
        factor_sizes=tuple(int(s) for s in r.factor_sizes),
        maps=maps(r.operand_mappings) + maps(r.result_mappings),
        reduction=frozenset(int(f) for f in r.reduction_factors),
        need_replication=frozenset(int(f) for f in r.need_replication_factors),
        blocked=frozenset(int(f) for f in r.blocked_propagation_factors),
    )


def _identity_rule(shape: tuple[int, ...], n: int) -> FactorRule:
    dims = tuple((d,) for d in range(len(shape)))
    return FactorRule(factor_sizes=tuple(shape), maps=(dims,) * n)


class _Builder:
    def __init__(self, module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP):
        self.ownership = ownership
        self.meshes = read_meshes(module)
        # The graph's axes are the largest mesh's; every sharding is read on the mesh it names.
        mesh = main_mesh(self.meshes)[1] if self.meshes else None
        self.g = ShardingGraph(
            axis_sizes=dict(mesh.axes) if mesh else {}, mesh_axes=tuple(mesh.names) if mesh else (),
            device_ids=mesh.device_ids if mesh else None,
        )
        self.module = module
        self.funcs = functions(module)
        self.returns: dict[str, list[int]] = {}
        # An op's sharding rule, read once per distinct rule: MLIR uniques attributes, and a deep program's
        # repeated layers carry the same few rules (reading one through the bindings is most of an op's cost).
        self.rules: dict[ir.Attribute, FactorRule] = {}
        self.constants: dict = {}  # ir.Value -> whether it is a constant expression
        # Ops of a private function carry no file location of their own; they are
        # reported at the line that called the function.
        self.call_sites: dict[str, SourceLocation | None] = {}
        self.fallback: SourceLocation | None = None
        self.manual_scope: frozenset[str] = frozenset()  # manual axes of the body being walked

    def where(self, loc) -> tuple[SourceLocation | None, SourceLocation | None]:
        """(user's line, library line) of a location; a private function's ops fall
        back to the line that called it."""
        source, via = attribution_of_location(loc, self.ownership) if loc is not None else (None, None)
        return source or self.fallback, via

    # -- tensors -------------------------------------------------------------
    def tensor(self, value, name: str, loc, compare: bool = True) -> int | None:
        """The tensor of an SSA value; ``loc`` is its location or the location's text."""
        if value in self.g.value_ids:
            return self.g.value_ids[value]
        try:
            rt = ir.RankedTensorType(value.type)
        except ValueError:
            return None  # tokens, tuples: nothing to shard
        shape = tuple(int(d) for d in rt.shape)
        source, via = self.where(loc)
        t = Tensor(
            id=len(self.g.tensors), name=name, shape=shape, dtype=mlir_dtype_to_hlo(str(rt.element_type)),
            source=source, via=via,
            op_name=op_name_of_location(loc) if loc is not None else None,
            dims=[() for _ in shape], closed=[False] * len(shape), priority=[None] * len(shape),
            compare=compare, parent=[None] * len(shape), manual_axes=self.manual_scope,
        )
        self.g.tensors.append(t)
        self.g.value_ids[value] = t.id
        return t.id

    def virtual(self, like: int, name: str) -> int:
        base = self.g.tensors[like]
        t = Tensor(
            id=len(self.g.tensors), name=name, shape=base.shape, dtype=base.dtype, source=base.source, via=base.via,
            op_name=base.op_name, dims=[() for _ in base.shape], closed=[False] * len(base.shape),
            priority=[None] * len(base.shape), virtual=True, compare=False, parent=[None] * len(base.shape),
        )
        self.g.tensors.append(t)
        return t.id

    def seed(self, tid: int, attr: ir.Attribute, what: str, drop_axes: frozenset[str] = frozenset()) -> None:
        s = sdy.TensorShardingAttr(attr)
        t = self.g.tensors[tid]
        t.mesh = mesh_of_sharding(s, self.meshes)
        sizes = dict(t.mesh.axes) or self.g.axis_sizes
        # Shardy's import removes axes of size 1 (sdy-remove-size-one-axes).
        drop_axes = drop_axes | {name for name, size in sizes.items() if size == 1}
        for d, dim in enumerate(read_dims(s)[: len(t.shape)]):
            t.dims[d] = dim_axes(dim, sizes, drop_axes)
            t.closed[d] = dim.closed
            t.priority[d] = dim.priority
        t.replicated = frozenset(
            (sdy.AxisRefAttr(a).name, 1, sizes.get(sdy.AxisRefAttr(a).name, 1)) for a in s.replicated_axes
            if sdy.AxisRefAttr(a).name not in drop_axes
        )
        t.seed = what

    def step(self, op: str, tensors: list[int | None], n_operands: int, rule: FactorRule, loc, edge=False,
             multi_use: bool = False, window: tuple[tuple[int, int], ...] | None = None) -> None:
        if any(t is None for t in tensors):
            return
        source, via = self.where(loc)
        self.g.steps.append(Step(
            id=len(self.g.steps), op=op, tensors=tuple(tensors), n_operands=n_operands, rule=rule,
            source=source, via=via, is_edge=edge, multi_use=multi_use, window=window,
        ))

    def multi_use(self, op) -> bool:
        """Whether an operand of ``op`` that Shardy would not split has several uses."""
        for v in op.operands:
            if not isinstance(v.type, ir.RankedTensorType) or not ir.RankedTensorType(v.type).shape:
                continue
            if self.constant_expression(v):
                continue
            if sum(1 for _ in v.uses) > 1:
                return True
        return False

    def constant_expression(self, value) -> bool:
        """A constant, an iota, or a region-free op of constant expressions: Shardy's
        import gives each use its own copy (sdy-constant-or-scalar-splitter)."""
        hit = self.constants.get(value)
        if hit is None:
            owner = value.owner
            if isinstance(owner, ir.Block) or not hasattr(owner, "name"):
                hit = False
            elif owner.name in ("stablehlo.constant", "sdy.constant", "stablehlo.iota"):
                hit = True
            else:
                operands = list(owner.operands)
                hit = bool(operands) and not owner.regions and all(self.constant_expression(v) for v in operands)
            self.constants[value] = hit
        return hit

    def edge(self, op: str, members: list[int | None], loc) -> None:
        members = [m for m in members if m is not None]
        if len(members) > 1:
            shape = self.g.tensors[members[0]].shape
            if all(self.g.tensors[m].shape == shape for m in members):
                self.step(op, members, 1, _identity_rule(shape, len(members)), loc, edge=True)

    # -- walking -------------------------------------------------------------
    def build(self) -> ShardingGraph:
        self.walked: set[str] = set()
        # Shardy's getMainFuncOrDie: the only function, else the one named main.
        self.g.entry = next(iter(self.funcs)) if len(self.funcs) == 1 else "main"
        order = ["main"] + [n for n in self.funcs if n != "main"] if "main" in self.funcs else list(self.funcs)
        self.pending_results: list = []
        # A private function's ops are reported at the line that called it: known for every function before
        # any is walked (module order puts a nested helper's clone before the clone that calls it).
        self.call_sites = call_sites(self.funcs, lambda loc: source_of_location(loc, self.ownership))
        for name in order:
            self.walk_function(name)
        for callee, results, loc in self.pending_results:
            for a, b in zip(results, self.returns.get(callee, [])):
                self.edge("func.call", [a, b], loc)
        for name, fn in self.funcs.items():
            self.link_results(name, fn)
        return self.g

    def walk_function(self, name: str) -> None:
        if name in self.walked or name not in self.funcs:
            return
        self.walked.add(name)
        self.fallback = self.call_sites.get(name)
        fn = self.funcs[name]
        state = ir.AsmState(fn)
        prefix = "" if name == "main" else f"@{name}:"
        block = fn.regions[0].blocks[0]
        arg_attrs = list(fn.arg_attrs) if "arg_attrs" in fn.operation.attributes else []
        for i, arg in enumerate(block.arguments):
            tid = self.tensor(arg, prefix + arg.get_name(state), arg.location)
            if tid is not None:
                self.g.function_args.append((tid, name))
            if tid is not None and i < len(arg_attrs) and "sdy.sharding" in ir.DictAttr(arg_attrs[i]):
                path = op_name_of_location(arg.location) if name == "main" else None
                what = f"argument {path}" if path else f"argument {self.g.tensors[tid].name}"
                self.seed(tid, ir.DictAttr(arg_attrs[i])["sdy.sharding"], what)
        self.walk_block(block, state, prefix, name)

    def walk_block(self, block, state, prefix: str, func: str) -> None:
        for op in block.operations:
            loc = str(op.location)  # printing a location is the costly part; once per op
            results = [self.tensor(r, prefix + r.get_name(state), loc,
                                   compare=op.name not in ("stablehlo.constant", "sdy.constant"))
                       for r in op.results]
            outer_scope = self.manual_scope
            if op.name == "sdy.manual_computation":
                self.manual_scope = outer_scope | _manual_axes(op)
            for region in op.regions:
                for inner in region.blocks:
                    for arg in inner.arguments:
                        self.tensor(arg, prefix + arg.get_name(state), op.location, compare=False)
            if op.name == "func.call":
                self.call(op, results, before_body=True)
            for region in op.regions:
                for inner in region.blocks:
                    self.walk_block(inner, state, prefix, func)
            self.manual_scope = outer_scope
            self.connect(op, results, func, loc)

    def while_edges(self, op, results) -> None:
        operands = [self.g.value_ids.get(v) for v in op.operands]
        cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
        yielded = [self.g.value_ids.get(v) for v in list(body.operations)[-1].operands]
        # As Shardy's data-flow edges: one per target (the result, each region's
        # argument), each tying the target to the same sources (operand, yielded value).
        for i, res in enumerate(results):
            self.edge("stablehlo.while", [operands[i], self.g.value_ids.get(cond.arguments[i]),
                                          self.g.value_ids.get(body.arguments[i]), yielded[i], res], op.location)

    def call(self, op, results, before_body: bool) -> None:
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        fn = self.funcs.get(callee)
        if fn is None:
            return
        operands = [self.g.value_ids.get(v) for v in op.operands]
        if before_body:
            self.g.call_results.extend(r for r in results if r is not None)
            first_call = callee not in self.walked
            if first_call:
                # A callee is walked in module order; its arguments are needed now.
                state = ir.AsmState(fn)
                for arg in fn.regions[0].blocks[0].arguments:
                    self.tensor(arg, f"@{callee}:" + arg.get_name(state), arg.location)
            args = [self.g.value_ids.get(a) for a in fn.regions[0].blocks[0].arguments]
            for a, b in zip(operands, args):
                self.edge("func.call", [a, b], op.location)
        elif callee in self.returns:
            for a, b in zip(results, self.returns[callee]):
                self.edge("func.call", [a, b], op.location)
        else:
            self.pending_results.append((callee, results, op.location))

    def connect(self, op, results: list[int | None], func: str, loc: str) -> None:
        name = op.name
        operands = [self.g.value_ids.get(v) for v in op.operands]
        attrs = op.attributes
        if "sdy.sharding" in attrs and name not in ("func.call",):
            per_value = sdy.TensorShardingPerValueAttr(attrs["sdy.sharding"])
            for tid, s in zip(results, per_value.shardings):
                if tid is not None:
                    self.seed(tid, s, f"sdy.sharding on {name}")
        if name == "func.return":
            self.returns[func] = operands
        elif name == "sdy.sharding_constraint":
            self.seed(results[0], attrs["sharding"], "sharding_constraint")
            # As Shardy's import does: a constrained value used only here, with no
            # sharding of its own, takes the constraint's sharding as a seed.
            value = op.operands[0]
            src = operands[0]
            if src is not None and not any(self.g.tensors[src].dims) and sum(1 for _ in value.uses) == 1 \
                    and not isinstance(value, ir.BlockArgument):
                self.seed(src, attrs["sharding"], "sharding_constraint (applied to its operand)")
                self.g.tensors[src].seed_source, self.g.tensors[src].seed_via = self.where(loc)
            self.edge(name, [operands[0], results[0]], loc)
        elif name == "stablehlo.while":
            self.while_edges(op, results)
        elif name in ("stablehlo.case", "stablehlo.if"):
            for region in op.regions:
                yielded = [self.g.value_ids.get(v) for v in list(region.blocks[0].operations)[-1].operands]
                for res, y in zip(results, yielded):
                    self.edge(name, [res, y], loc)
        elif name == "stablehlo.optimization_barrier":
            for a, b in zip(operands, results):
                self.edge(name, [a, b], loc)
        elif name == "sdy.manual_computation":
            self.manual(op, operands, results)
        elif name == "sdy.propagation_barrier" and operands[0] is not None and results[0] is not None:
            # Shardy's PropagationDirection enum, printed as its integer.
            allowed = ("none", "forward", "backward", "both")[ir.IntegerAttr(attrs["allowed_direction"]).value]
            source, via = self.where(loc)
            shape = self.g.tensors[results[0]].shape
            self.g.steps.append(Step(
                id=len(self.g.steps), op=name, tensors=(operands[0], results[0]), n_operands=1,
                rule=_identity_rule(shape, 2), source=source, via=via, is_edge=True,
                allowed_direction=allowed,
            ))
        elif name == "func.call":
            self.call(op, results, before_body=False)
        elif "sdy.sharding_rule" in attrs:
            attr = attrs["sdy.sharding_rule"]
            rule = self.rules.get(attr) or self.rules.setdefault(attr, _rule(attr))
            self.step(name, operands + results, len(operands), rule, loc,
                      multi_use=self.multi_use(op), window=window_of(op))
        elif name not in ("stablehlo.constant", "sdy.constant", "stablehlo.return", "sdy.return") and results:
            self.g.without_rule.append(name)
        if name in EXPLICIT_KINDS:
            found = read_explicit(op, results, *self.where(loc))
            if found is not None:
                self.g.explicit.append(found)

    def manual(self, op, operands, results) -> None:
        """Shardy's data-flow edges of a ``manual_computation``: an operand and its
        in_sharding (the body argument's owner, global view) are one edge; the body
        argument sees that sharding less the manual axes, and free axes found inside
        come back out after them. Results and the yielded values likewise."""
        attrs = op.attributes
        manual_axes = _manual_axes(op)
        ins = sdy.TensorShardingPerValueAttr(attrs["in_shardings"]).shardings
        outs = sdy.TensorShardingPerValueAttr(attrs["out_shardings"]).shardings
        body = op.regions[0].blocks[0]
        for i, (operand, s) in enumerate(zip(operands, ins)):
            arg = self.g.value_ids.get(body.arguments[i])
            if operand is None or arg is None:
                continue
            holder = self.virtual(operand, f"{self.g.tensors[operand].name} (shard_map in)")
            self.seed(holder, s, "shard_map in_specs")
            self.edge("sdy.manual_computation", [operand, holder], op.location)
            self.seed(arg, s, "shard_map in_specs (free axes)", drop_axes=manual_axes)
            self.boundary(holder, arg, manual_axes, op.location)
        yielded = [self.g.value_ids.get(v) for v in list(body.operations)[-1].operands]
        for res, y, s in zip(results, yielded, outs):
            if res is None:
                continue
            self.seed(res, s, "shard_map out_specs")
            if y is not None:
                self.boundary(res, y, manual_axes, op.location)

    def boundary(self, outer: int, inner: int, manual_axes: frozenset[str], loc) -> None:
        # The body's shape is the local one (divided by the manual axes): the step
        # maps dimensions one to one and sizes play no part in it.
        shape = self.g.tensors[outer].shape
        source, via = self.where(loc)
        self.g.steps.append(Step(
            id=len(self.g.steps), op="sdy.manual_computation", tensors=(outer, inner), n_operands=1,
            rule=_identity_rule(shape, 2), source=source, via=via, is_edge=True, manual_axes=manual_axes,
        ))

    def link_results(self, name: str, fn) -> None:
        returned = self.returns.get(name, [])
        res_attrs = list(fn.result_attrs) if "res_attrs" in fn.operation.attributes else []
        for i, tid in enumerate(returned):
            if tid is None or i >= len(res_attrs) or "sdy.sharding" not in ir.DictAttr(res_attrs[i]):
                continue
            holder = self.virtual(tid, f"{'result' if name == 'main' else '@' + name + ' result'} {i}")
            self.seed(holder, ir.DictAttr(res_attrs[i])["sdy.sharding"], f"out_shardings of result {i}")
            self.edge("func.return", [tid, holder], None)


def _manual_axes(op) -> frozenset[str]:
    # #sdy<manual_axes{"x", "y"}>: the bindings expose no accessor for the names.
    return frozenset(re.findall(r'"([^"]+)"', str(op.attributes["manual_axes"])))


def build_graph(module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> ShardingGraph:
    """The propagation graph of a module that already carries sharding rules."""
    return _Builder(module, ownership).build()
