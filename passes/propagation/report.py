"""The propagation pass: rules from Shardy and our propagation over a module
(``run_propagation``), the values with their provenance, and agreement with
Shardy's own propagation of the same module; ``passes/pipelines/propagate.py``
schedules them into the ``propagate`` report."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ..common.axes import label, merge_adjacent
from ..common.pytree_paths import path_keys
from ..common.shapes import array_bytes
from ..models.propagation import (
    Disagreement,
    PropagatedValue,
    PropagationReport,
    ProvenanceStep,
    ShardyAgreement,
)
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from ..stablehlo.module import entry_function, mesh_of_sharding, read_meshes
from .call_graph import flatten_call_graph
from .graph import ShardingGraph, Tensor, user_label
from .predicted_communication import per_device_bytes
from .propagate import propagate
from .sharding_graph import build_graph
from .shardy_reference import pair_values, shardy_propagated, tagged_clone, with_sharding_rules

MAX_DISAGREEMENTS = 200


@dataclass
class Propagated:
    """The graph after propagation, with the module it was built from."""

    module: ir.Module
    graph: ShardingGraph
    sweeps: int
    # The program propagated, before Shardy's rules were attached: the module, or
    # its copy with the call graph flattened as Shardy's import does.
    flat: ir.Module | None = None
    _origins: dict = field(default_factory=dict, repr=False)

    def labels(self, t: Tensor) -> list[list[str]]:
        return [[label(r, self.graph.axis_sizes) for r in merge_adjacent(d)] for d in t.dims]

    def provenance(self, t: Tensor) -> list[ProvenanceStep]:
        """From the value back to the stated sharding it came from, one hop per op,
        following one mesh axis (the first the value is sharded on) across hops."""
        from ..common.axes import overlaps

        chain: list[ProvenanceStep] = []
        seen = {t.id}
        current = t
        dim = next((d for d, axes in enumerate(t.dims) if axes), None)
        axis = t.dims[dim][0] if dim is not None else None
        while dim is not None and current.parent[dim] is not None:
            src_id, step_id = current.parent[dim]
            step = self.graph.steps[step_id]
            chain.append(ProvenanceStep(
                value=current.name, sharding=self.labels(current), op=step.op, source=step.source, via=step.via,
            ))
            if src_id in seen:
                break
            seen.add(src_id)
            current = self.graph.tensors[src_id]
            dim = next((d for d, axes in enumerate(current.dims) if any(overlaps(axis, a) for a in axes)), None)
        stated_at = (current.seed_source, current.seed_via) if current.seed_source else (current.source, current.via)
        chain.append(ProvenanceStep(
            value=current.name, sharding=self.labels(current), op=None, source=stated_at[0], via=stated_at[1]))
        return chain

    def seed_of(self, t: Tensor) -> str | None:
        """The stated sharding a value's sharding came from: the end of its
        provenance chain, found by following parent links (memoised per value and
        axis, so asking for every value costs one walk of the graph)."""
        from ..common.axes import overlaps

        dim = next((d for d, axes in enumerate(t.dims) if axes), None)
        if dim is None:
            return t.seed
        axis = t.dims[dim][0]
        memo = self._origins
        path: list[tuple[int, object]] = []
        seen = {t.id}
        current = t
        while True:
            key = (current.id, axis)
            if key in memo:
                origin = memo[key]
                break
            path.append(key)
            if dim is None or current.parent[dim] is None:
                origin = current.id
                break
            src_id, _ = current.parent[dim]
            if src_id in seen:  # a cycle (a loop's carried value): the chain ends here
                origin = current.id
                break
            seen.add(src_id)
            current = self.graph.tensors[src_id]
            dim = next((d for d, axes in enumerate(current.dims) if any(overlaps(axis, a) for a in axes)), None)
        for key in path:
            memo[key] = origin
        return self.graph.tensors[origin].seed


def run_propagation(module: ir.Module, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> Propagated:
    flat = flatten_call_graph(module)
    ruled = with_sharding_rules(flat)
    graph = build_graph(ruled, ownership)
    stats = propagate(graph)
    return Propagated(ruled, graph, stats.sweeps, flat)


def agreement(p: Propagated, original: ir.Module) -> ShardyAgreement:
    """Our sharding of every value the report lists against Shardy's pipeline on the
    same module, values paired by op identity. ``reported`` counts the values,
    ``compared`` those Shardy's output has, ``not_compared`` says why the rest are not."""
    theirs = shardy_propagated(tagged_clone(p.flat if p.flat is not None else original))
    meshes = read_meshes(original)
    paired = pair_values(
        p.module, theirs, lambda attr: dict(mesh_of_sharding(sdy.TensorShardingAttr(attr), meshes).axes))
    compared = agreeing = reported = 0
    not_compared: dict[str, int] = {}
    disagreements: list[Disagreement] = []
    for value, tid in p.graph.value_ids.items():
        t = p.graph.tensors[tid]
        if t.virtual or not t.compare:
            continue
        reported += 1
        theirs_dims = paired.shardings.get(value)
        if theirs_dims is None:
            reason = paired.not_paired.get(value, "not in Shardy's output")
            not_compared[reason] = not_compared.get(reason, 0) + 1
            continue
        compared += 1
        mine = tuple(merge_adjacent(d) for d in t.dims)
        if mine == theirs_dims:
            agreeing += 1
        elif len(disagreements) < MAX_DISAGREEMENTS:
            disagreements.append(Disagreement(
                value=t.name, op_name=t.op_name, source=t.source, via=t.via, ours=p.labels(t),
                shardy=[[label(r, p.graph.axis_sizes) for r in d] for d in theirs_dims],
            ))
    return ShardyAgreement(
        reported=reported, compared=compared, agreeing=agreeing,
        fraction=round(agreeing / compared, 4) if compared else None,
        not_compared=dict(sorted(not_compared.items())), disagreements=disagreements,
    )


def propagated_value(p: Propagated, t: Tensor, with_provenance: bool) -> PropagatedValue:
    return PropagatedValue(
        name=t.name, shape=list(t.shape), dtype=t.dtype, sharding=p.labels(t),
        bytes=array_bytes(t.dtype, list(t.shape)), per_device_bytes=per_device_bytes(t),
        op_name=t.op_name, source=t.source, via=t.via, seed=p.seed_of(t) if any(t.dims) else None,
        provenance=p.provenance(t) if with_provenance and any(t.dims) else [],
    )


def with_provenance(report: PropagationReport, p: Propagated, tensors: list[Tensor]) -> PropagationReport:
    """The report with these values' provenance written out (added to the list
    when the cap left them out)."""
    by_name = {v.name: i for i, v in enumerate(report.values)}
    values = list(report.values)
    for t in tensors:
        v = propagated_value(p, t, True)
        if t.name in by_name:
            values[by_name[t.name]] = v
        else:
            values.append(v)
    return report.model_copy(update={"values": values})


def find_values(p: Propagated, query: str) -> list[Tensor]:
    """Values named by an SSA name (``%3``, ``@f:%2``), a source ``file:line``, or an
    input or output pytree path (``state['w']``, ``result[0]``)."""
    g = p.graph
    by_name = g.tensors_by_name()
    if query in by_name:
        return [by_name[query]]
    if ":" in query and query.rsplit(":", 1)[1].isdigit() and not query.startswith("@"):
        file, line = query.rsplit(":", 1)

        def at(where: SourceLocation | None) -> bool:
            return where is not None and where.line == int(line) and (
                where.file == file or where.file.endswith("/" + file.lstrip("./")))

        # The user's line, else the library line a report prints as ``via`` (every op of a library call sits at
        # the user's one line; its via tells them apart).
        hits = [t for t in g.tensors if not t.virtual and at(t.source)] or [
            t for t in g.tensors if not t.virtual and at(t.via)]
        return sorted(hits, key=lambda t: -array_bytes(t.dtype, list(t.shape)))
    fn = entry_function(p.module)
    block = fn.regions[0].blocks[0]
    for arg in block.arguments:
        if _loc_name(arg.location) == query:
            return [g.tensors[g.value_ids[arg]]]
    res_attrs = list(fn.result_attrs) if "res_attrs" in fn.operation.attributes else []
    returned = list(list(block.operations)[-1].operands)
    for i, attrs in enumerate(res_attrs):
        d = ir.DictAttr(attrs)
        path = ir.StringAttr(d["jax.result_info"]).value if "jax.result_info" in d else f"result[{i}]"
        if (path == query or path_keys(path) == path_keys(query)) and returned[i] in g.value_ids:
            return [g.tensors[g.value_ids[returned[i]]]]
    return []


def _loc_name(loc) -> str | None:
    from ..stablehlo.module import op_name_of_location

    return op_name_of_location(loc)


def explain(p: Propagated, t: Tensor, display=str) -> list[str]:
    """Provenance as sentences, for findings and the terminal, in the user's terms: a value is
    the argument it is or its type, an op its name at the user's line (``display`` turns a source
    location into the text to print); the SSA names stay in ``ProvenanceStep.value``."""
    by_name = p.graph.tensors_by_name()
    lines = []
    for k, step in enumerate(p.provenance(t)):
        where = f" at {display(step.source)}" if step.source else ""
        spec = _spec_text(step.sharding)
        # The chain starts at the value itself: by its name, another result of the same op could be found.
        value = t if k == 0 else by_name.get(step.value)
        label = user_label(value) if value is not None else step.value
        if step.op:
            lines.append(f"{label} is {spec} through {_op_words(step.op)}{where}")
        elif value is not None and label.startswith("argument "):
            lines.append(f"{label} is {spec}")
        else:
            seed = value.seed if value is not None and value.seed else "no stated sharding"
            lines.append(f"{label} is {spec}: {seed}{where}")
    return lines


def chain_heading(p: Propagated, t: Tensor, display=str) -> str:
    """The line over a value's chain (``explain``), so chains of several values read apart: what the value is,
    its sharding, the SSA name ``--explain`` also takes, and its line: ``f32[32768,1024] P('data', 'model')
    (%1234 at gnn_step.py:25):``."""
    spec = _spec_text(p.labels(t))
    where = (f" at {display(t.source)}" if t.source else "") + (f" via {display(t.via)}" if t.via else "")
    return f"{user_label(t)} {spec} ({t.name}{where}):"


def _spec_text(sharding) -> str:
    return "P(" + ", ".join(repr(a[0]) if len(a) == 1 else (str(tuple(a)) if a else "None") for a in sharding) + ")"


# Ops as a user knows them; the rest by their name without the dialect.
_OP_WORDS = {"stablehlo.while": "a loop carry", "func.call": "a call", "sdy.sharding_constraint":
             "with_sharding_constraint", "sdy.manual_computation": "shard_map", "stablehlo.dot_general": "a matmul"}


def _op_words(op: str) -> str:
    return _OP_WORDS.get(op, op.rsplit(".", 1)[-1])
