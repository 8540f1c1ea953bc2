"""A combined reduction's values, one at a time: each operand of a tuple all-reduce as a collective of its own.

XLA's all-reduce combiner joins reductions that are ready together into one tuple all-reduce: a
row-parallel projection's partial sums beside a vocabulary-parallel embedding's masked lookup, say. Each
value has its own producing op and parameter. The collective passes (intent, origin, parameter, the
tensor-parallel pairs) trace one operand; asked about the combined op they would mix one value's matmul
with another's parameter. So each part is traced alone: ``part_view`` gives a module in which every part
is an instruction of its own (the combined op with that one operand and its own result shape), and the
part as a ``Collective`` with that value's shape and bytes, for the passes to read unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..common.byte_sizes import format_bytes
from ..common.device_groups import MeshInfo
from ..common.shapes import parse_arrays, split_tuple
from ..common.sharding_text import pspec_text
from ..models.report import Collective, TensorInfo
from ..source.frames import CodeOwnership
from .collective_intent import INTENDED, classify
from .collective_origin import Display, collective_origins
from .collective_parameter import ParameterRole, collective_parameters
from .collective_site import part_sites
from .concatenated_sums import concatenated_values, offsets, slices_back
from .module import HloInstruction, HloModule
from .tensor_parallel_pairs import mark_row_parallel_sums

# Reductions: each value's sum is its own producer's (a combined gather's values are one layer's weights,
# which the passes already name one by one through their common reader).
_SPLIT_KINDS = frozenset({"all-reduce"})


@dataclass(frozen=True)
class CombinedParts:
    module: HloModule  # the compiled module with every part as an instruction of its own
    parts: dict[str, tuple[Collective, ...]]  # the combined collective's HLO name -> its parts, in operand order

    @property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(p for ps in self.parts.values() for p in ps)


def part_name(hlo_name: str, k: int) -> str:
    """The name of the ``k``-th operand's part (no HLO name has a '#')."""
    return f"{hlo_name}#{k}"


def part_view(module: HloModule | None, collectives: tuple[Collective, ...], ownership: CodeOwnership,
              ) -> CombinedParts | None:
    """The combined reductions' parts, and the module that holds them; None when there are none."""
    if module is None:
        return None
    added: dict[str, HloInstruction] = {}
    users = dict(module.users())
    found: dict[str, tuple[Collective, ...]] = {}
    for c in collectives:
        ins = module.instruction(c.hlo_name)
        if c.kind in _SPLIT_KINDS and ins is not None and concatenated_values(module, ins):
            if concatenated := _concatenated_parts(module, c, ins, users, added, ownership):
                found[c.hlo_name] = concatenated
            continue
        if c.kind not in _SPLIT_KINDS or ins is None or len(ins.operands) < 2:
            continue
        shapes = split_tuple(ins.shape)
        if len(shapes) != len(ins.operands):
            continue
        elements = {u.attrs.get("index"): u for u in users.get(ins.name, ()) if u.opcode == "get-tuple-element"}
        sites = part_sites(module, ins, c.kind)
        parts = []
        for k, (operand, shape) in enumerate(zip(ins.operands, shapes)):
            arrays = parse_arrays(shape)
            if len(arrays) != 1:
                break
            name = part_name(ins.name, k)
            added[name] = HloInstruction(name, ins.opcode, shape, (operand,), ins.attr_text)
            element = elements.get(str(k))
            users[name] = list(users.get(element.name, ())) if element is not None else []
            site = sites[k]
            source, via = module.attribution_of(site, ownership) if site is not None else (c.source, c.via)
            parts.append(c.model_copy(update={
                "hlo_name": name, "shape": list(arrays[0].dims), "dtype": arrays[0].dtype,
                "bytes": arrays[0].nbytes, "parts": [], "pieces": [], "why": None, "input_path": None,
                "source": source or c.source, "via": via if source else c.via}))
        else:
            found[c.hlo_name] = tuple(parts)
    if not found:
        return None
    derived = dict(module.derived)
    derived["users"] = users
    module.computation_of(module.entry)  # builds the index copied below
    derived["computation_of"] = {**module.derived["computation_of"], **{
        n: module.computation_of(n.split("#")[0]) or "" for n in added}}
    view = dataclasses.replace(module, by_name={**module.by_name, **added}, derived=derived)
    return CombinedParts(view, found)


def _concatenated_parts(module: HloModule, c: Collective, ins: HloInstruction,
                        users: dict[str, list[HloInstruction]], added: dict[str, HloInstruction],
                        ownership: CodeOwnership) -> tuple[Collective, ...]:
    """The parts of a sum of values concatenated into one buffer (GPU's combiner): each value, read where the
    slice that takes it back out of the sum is read."""
    values = concatenated_values(module, ins) or []
    back = slices_back(module, ins, users)
    parts = []
    for k, (value, offset) in enumerate(zip(values, offsets(module, ins))):
        producer = module.instruction(value)
        arrays = parse_arrays(producer.shape) if producer is not None else []
        if producer is None or len(arrays) != 1:
            return ()
        name = part_name(ins.name, k)
        added[name] = HloInstruction(name, ins.opcode, producer.shape, (value,), ins.attr_text)
        users[name] = list(users.get(back[offset].name, ())) if offset in back else []
        source, via = module.attribution_of(producer, ownership)
        parts.append(c.model_copy(update={
            "hlo_name": name, "shape": list(arrays[0].dims), "dtype": arrays[0].dtype, "bytes": arrays[0].nbytes,
            "parts": [], "pieces": [], "why": None, "input_path": None, "source": source or c.source,
            "via": via if source else c.via}))
    return tuple(parts)


def parts_why(c: Collective, parts: tuple[Collective, ...]) -> str | None:
    """A combined collective's why: each part's that has one, with its bytes; None where none has."""
    # Parts of one shape with one why (a loop's unrolled reads of one array) are said once, with their count.
    said: dict[tuple[str, str, int, str], int] = {}
    for p in parts:
        if p.why:
            key = (p.dtype, str(p.shape), p.bytes, p.why)
            said[key] = said.get(key, 0) + 1
    if not said:
        return None
    # The parts no pass explained are counted, so the values said and those left add up to the number given.
    untraced = len(parts) - sum(said.values())
    return f"{len(parts)} values combined into one {c.kind} ({format_bytes(c.bytes)}): " + "; ".join(
        f"{dtype}{shape} ({format_bytes(nbytes)}): {why}" if n == 1 else
        f"{n} of {dtype}{shape} ({format_bytes(nbytes)} each): {why}"
        for (dtype, shape, nbytes, why), n in said.items()) + (
        f"; {untraced} more not traced to a cause" if untraced else "")


def traced_parts(module: HloModule | None, collectives: tuple[Collective, ...], inputs: tuple[TensorInfo, ...],
                 params: tuple[TensorInfo, ...], mesh: MeshInfo, ownership: CodeOwnership, display: Display,
                 ) -> tuple[tuple[Collective, ...], CombinedParts | None]:
    """The collectives, each combined reduction's why made of its parts' (each traced alone: its intent, the
    input it reads, the tensor-parallel pair it closes), and the parts so traced."""
    found = part_view(module, collectives, ownership)
    if found is None:
        return collectives, None
    parts = classify(found.collectives, found.module, params, mesh)
    parts = collective_origins(found.module, parts, inputs, ownership, display)
    parts = mark_row_parallel_sums(found.module, parts, params)
    parts = _lookups_named(found.module, parts, inputs, params, mesh, display)
    parts = _continued_sums(found.module, parts)
    by_name = {p.hlo_name: p for p in parts}
    traced = CombinedParts(found.module, {name: tuple(by_name[p.hlo_name] for p in ps)
                                          for name, ps in found.parts.items()})
    out = []
    for c in collectives:
        why = parts_why(c, traced.parts[c.hlo_name]) if c.hlo_name in traced.parts else None
        update = {"why": why} if why else {}
        if (intent := _concatenated_intent(module, c, traced.parts.get(c.hlo_name, ()))) is not None \
                or (intent := _tuple_intent(c, traced.parts.get(c.hlo_name, ()))) is not None:
            update["intent"] = intent
        out.append(c.model_copy(update=update) if update else c)
    return tuple(out), traced


def _concatenated_intent(module: HloModule | None, c: Collective, parts: tuple[Collective, ...]) -> str | None:
    """A GPU combined sum's intent, read from its values: its shape is the flattened buffer's, which no
    parameter has (the weights' gradients of a step summed over the batch axes at once read as a reshard, or
    as a matmul's partial sums by the first value alone). Where every value is intended traffic, the intent
    of the largest; None where any is not, or the sum is no concatenation (a tuple's is its operands')."""
    ins = module.instruction(c.hlo_name) if module is not None else None
    if ins is None or not parts or not concatenated_values(module, ins) \
            or any(p.intent not in INTENDED for p in parts):
        return None
    return max(parts, key=lambda p: p.bytes).intent


def _continued_sums(module: HloModule, parts: tuple[Collective, ...]) -> tuple[Collective, ...]:
    """Each part that sums, over more axes, a part another combined reduction summed first (XLA sums a weight's
    gradient over 'model', then the tuple's result over 'data'): the same sum, continued, with that part's
    intent; read alone, its operand is the first sum's tuple element, no matmul, and it looked a reshard."""
    by_name = {p.hlo_name: p for p in parts}
    out = []
    for p in parts:
        ins = module.instruction(p.hlo_name)
        operand = module.instruction(ins.operands[0]) if ins is not None and ins.operands else None
        first = None
        if p.intent not in INTENDED and operand is not None and operand.opcode == "get-tuple-element" \
                and operand.operands and str(operand.attrs.get("index", "")).isdigit():
            first = by_name.get(part_name(operand.operands[0], int(str(operand.attrs["index"]))))
        if first is not None and first.kind == p.kind and first.shape == p.shape \
                and first.intent in ("gradient-reduction", "activation"):
            p = p.model_copy(update={"intent": first.intent})
        out.append(p)
    return tuple(out)


def _tuple_intent(c: Collective, parts: tuple[Collective, ...]) -> str | None:
    """A tuple reduction read as a reshard whose every value is intended traffic: the intent of the largest
    value. XLA's combiner joins a step's weight gradients with its loss's sum, and the op as a whole (the loss's
    scalar first, a gradient's full shape summed over the batch axes while the weight is gathered on another)
    matches no one parameter's reduction: every value does, and the op was a reshard no stated sharding asked
    for (newbie19's haliax step: an SL101 warning on its data-parallel gradient sum). An intended op keeps its
    own intent; None where any value is not intended."""
    if c.intent in INTENDED or not parts or any(p.intent not in INTENDED for p in parts):
        return None
    return max(parts, key=lambda p: p.bytes).intent


def _lookups_named(module: HloModule, parts: tuple[Collective, ...], inputs: tuple[TensorInfo, ...],
                   params: tuple[TensorInfo, ...], mesh: MeshInfo, display: Display) -> tuple[Collective, ...]:
    """Each part that sums a lookup into a parameter sharded on its rows (a vocabulary-parallel embedding)
    said to be that: the sum is the cost the table's layout asks for, whatever reduction it was combined with."""
    found = collective_parameters(module, parts, inputs, mesh)
    tables = {t.index: t for t in params}
    out = []
    for p in parts:
        at = found.get(p.hlo_name)
        t = tables.get(at.index) if at is not None and at.role == ParameterRole.read and at.contracting == (0,) \
            else None
        if t is None or len(t.shape) != 2:
            out.append(p)
            continue
        axes = ", ".join(p.mesh_axes)
        at_line = f" at {display(p.source, p.via)}" if p.source else ""
        out.append(p.model_copy(update={"why": (
            f"a vocabulary-parallel lookup{at_line}: {t.path} {pspec_text(t.sharding)} is sharded on its rows, so each "
            f"device looks up only the rows in its own shard and masks the rest, and the {p.kind} over {axes} sums "
            f"the masked lookups (every device then holds the whole {p.dtype}{p.shape}, {format_bytes(p.bytes)}): "
            "the cost that sharding the table on its rows asks for")}))
    return tuple(out)
