"""Where a collective's data comes from, read in the compiled HLO: which input
its operand is (operand identity, not a shape that happens to match), and why
a resharding collective runs at all.

The why names the op that reads along a sharded dimension and what XLA does
about it: the SPMD partitioner turns a gather whose operand is sharded along an
indexed dimension into a local gather from each device's shard, a mask, and an
all-reduce of the masked partial results (every device then holds the whole
gathered result); an all-gather of an input rebuilds it before an op that
reads along the sharded dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..models.report import Collective, SourceLocation, TensorInfo, where_text
from ..source.frames import CodeOwnership
from .gpu_matmuls import tuple_element_parameters
from .module import HloInstruction, HloModule
from .value_origin import (
    DIMENSION_NUMBERS,
    MAX_STEPS,
    SAME_DATA,
    OriginIndex,
    entry_parameter,
    moved_parameter,
    moves_data_only,
    origin_index,
    parameter_dims,
)

__all__ = ["FFT_COMPUTED_REPLICATED", "FFT_READS_SHARDED", "at_out_shardings", "collective_origin",
           "collective_origins", "fft_caused", "outputs_depending_on", "outputs_returning", "pinned_output", "reads_in"]

# How a finding names a source line: where_text, or the CLI's path-relative version.
Display = Callable[..., str]

_READS = frozenset({"gather", "dynamic-slice"})


def _sharded_dims(t: TensorInfo) -> dict[int, list[str]]:
    return {d: axes for d, axes in enumerate(t.sharding or []) if axes}


def _fusion_parameter(module: HloModule, op: HloInstruction) -> int | None:
    """The number of the fusion parameter a read op reads (its first operand)."""
    read = module.instruction(op.operands[0]) if op.operands else None
    number = read.operands[0] if read is not None and read.opcode == "parameter" and read.operands else ""
    return int(number) if number.isdigit() else None


def reads_in(module: HloModule, producer: HloInstruction, index: OriginIndex,
              ) -> list[tuple[HloInstruction, int, tuple[int, ...]]]:
    """(read op, input number, dims it indexes, numbered as the input's) for the gathers and
    dynamic slices that produce a value: the op itself, or inside the fusion that computes it.
    A dimension a reshape merges or splits on the way from the input is left out."""
    found: list[tuple[HloInstruction, int, tuple[int, ...]]] = []
    outputs = module.instruction(producer.operands[0]) if producer.opcode == "get-tuple-element" else None
    if outputs is not None and outputs.opcode == "fusion" and producer.attrs.get("index", "").isdigit():
        # one output of a multi-output fusion (GPU's: two lookups of one table in one loop fusion): the reads
        # of the parameters that output is computed from
        numbers = tuple_element_parameters(module, outputs, int(producer.attrs["index"])) or set()
        return [r for r in reads_in(module, outputs, index) if _fusion_parameter(module, r[0]) in numbers]
    if producer.opcode in _READS:
        candidates = [(producer, producer.operands[0] if producer.operands else None)]
    elif producer.opcode == "fusion":
        comp = module.computations.get(next((c for a, c in producer.called() if a == "calls"), ""))
        candidates = [(i, i.operands[0] if i.operands else None) for i in (comp.instructions if comp else ())
                      if i.opcode in _READS]
    else:
        candidates = []
    for op, operand in candidates:
        if operand is None:
            continue
        if op.opcode == "gather":
            dims = tuple(int(d) for d in DIMENSION_NUMBERS.findall(op.attrs.get("start_index_map", "")))
        else:  # dynamic-slice: the dimensions whose start is not a constant
            dims = tuple(d for d, start in enumerate(op.operands[1:])
                         if (s := module.by_name.get(start)) is None or s.opcode != "constant")
        walked = parameter_dims(module, operand, index, dims)
        if walked is None:
            continue
        # The input's own dimensions: the read's operand may be a transposed copy of it.
        found.append((op, walked[0], tuple(d for d in walked[1] if d is not None)))
    return found


def collective_origin(module: HloModule, c: Collective, inputs: tuple[TensorInfo, ...], ownership: CodeOwnership,
                      index: OriginIndex | None = None, display: Display = where_text) -> tuple[str | None, str | None]:
    """(the path of the input the collective's operand is; why the collective runs),
    each None when the compiled program does not say."""
    index = index or origin_index(module)
    ins = module.by_name.get(c.hlo_name)
    if ins is None or not ins.operands:
        return None, None
    by_number = {t.index: t for t in inputs}
    k = entry_parameter(module, ins.operands[0], index)
    owner = by_number.get(k) if k is not None else None
    if owner is None and (moved := moved_parameter(module, ins.operands[0], index)) is not None:
        # One layer of a stacked input (an FSDP gather in a scan's body), or the shard a collective matmul's
        # ring passes on: that input is named, not said to be rebuilt whole.
        return (by_number[moved].path if moved in by_number else None), None
    whole = f"{c.dtype}{list(c.shape)} ({format_bytes(c.bytes)})"

    if c.kind == "all-gather" and owner is not None and _sharded_dims(owner):
        return owner.path, (f"XLA all-gathers the whole of {owner.path} {pspec_text(owner.sharding)} over "
                            f"{', '.join(c.mesh_axes)} onto every device: {whole} per device")
    for name in ins.operands:
        producer = module.by_name.get(name)
        if producer is None:
            continue
        for op, number, dims in reads_in(module, producer, index):
            t = by_number.get(number)
            if t is None:
                continue
            sharded = {d: axes for d, axes in _sharded_dims(t).items() if d in dims}
            if not sharded:
                continue
            d, axes = next(iter(sorted(sharded.items())))
            src, via = module.attribution_of(op, ownership)
            at = f" at {display(src, via)}" if src or via else ""
            kind = "gather" if op.opcode == "gather" else "dynamic slice"
            return owner.path if owner else None, (
                f"the {kind}{at} reads {t.path} {pspec_text(t.sharding)} along dimension {d}, which is sharded "
                f"on {', '.join(axes)}: each device reads only its own shard, and the {c.kind} over "
                f"{', '.join(c.mesh_axes)} {_combines(c.kind)}, so every device holds the whole {whole}")
    if (fft := _fft_gathered(module, ins)) is not None:
        kind, batch_only, fft_dims = fft
        if batch_only is None:
            return (owner.path if owner else None), (
                f"an FFT{kind} reads what the {c.kind} over {', '.join(c.mesh_axes)} gathers, after XLA transposes "
                f"it: {FFT_READS_SHARDED} (or, on some XLA releases, it is partitioned only along that), so the "
                f"{c.kind} rebuilds the whole {whole} on every device first")
        if batch_only:
            return (owner.path if owner else None), (
                f"an FFT{kind} transforms its last dimensions, not the batch dimension the {c.kind} over "
                f"{', '.join(c.mesh_axes)} gathers: {FFT_COMPUTED_REPLICATED} and computes it replicated "
                f"otherwise, so every device holds the whole {whole} and transforms every "
                "batch element (newer XLA releases keep such an FFT local)")
        return (owner.path if owner else None), (
            f"an FFT{kind} transforms dimension {', '.join(map(str, fft_dims))}, which is sharded on "
            f"{', '.join(c.mesh_axes)}: {FFT_READS_SHARDED}, so the {c.kind} rebuilds the whole {whole} on "
            "every device first")
    return (owner.path if owner else None), None


# How collective_origin's why reads for an FFT gathered along its batch (SL101 reads it for its fix), and for
# one gathered along a dimension it transforms: SL101 reads either as a gather an FFT causes (fft_caused).
FFT_COMPUTED_REPLICATED = "this XLA partitions an FFT only along what it transforms"
FFT_READS_SHARDED = "an FFT reads every element along what it transforms"


def fft_caused(why: str | None) -> bool:
    """Whether a collective's why (collective_origin's) says an FFT reads the value it gathers."""
    return bool(why) and (FFT_COMPUTED_REPLICATED in why or FFT_READS_SHARDED in why)  # type: ignore[operator]


def _fft_gathered(module: HloModule, ins: HloInstruction) -> tuple[str, bool | None, list[int]] | None:
    """Where an all-gather feeds an FFT: the FFT's kind (` (IRFFT)`), whether it gathers along none of the
    dimensions the FFT transforms (its last ``len(fft_length)``: a batch dimension only; None where ops that
    change the dimensions stand between), and the gathered dimensions; else None."""
    gathered = {int(d) for d in ins.attrs.get("dimensions", "").strip("{}").split(",") if d.strip().isdigit()}
    if ins.opcode not in ("all-gather", "all-gather-start") or not gathered:
        return None
    users = module.users()
    # An async gather (a GPU's, a TPU's) hands its result on through its -done: the gathered value is that.
    result = ins if ins.opcode == "all-gather" else next(
        (u for u in users.get(ins.name, []) if u.opcode == "all-gather-done"), None)
    if result is None:
        return None
    rank = len(result.shape.split("[", 1)[1].split("]", 1)[0].split(",")) if "[" in result.shape else 0
    # Its readers, and theirs through copies (XLA's wrapped copy of a gathered operand into the FFT's layout);
    # on a GPU also through the combined gather's tuple and the transposes and reshapes XLA puts before a cuFFT
    # call, after which which dimension is which is no longer known (``exact`` False: said without it).
    readers = [(u, True) for u in users.get(result.name, [])]
    seen = {ins.name, result.name}
    while readers and len(seen) < MAX_STEPS:
        user, exact = readers.pop(0)
        seen.add(user.name)
        transformed = len([n for n in user.attrs.get("fft_length", "").strip("{}").split(",") if n.strip()])
        if user.opcode == "fft" and transformed:
            kind = f" ({user.attrs['fft_type']})" if user.attrs.get("fft_type") else ""
            return kind, (max(gathered) < rank - transformed) if exact else None, sorted(gathered)
        same = user.opcode == "copy" or (user.opcode == "fusion" and len(user.operands) == 1
                                         and moves_data_only(module, user) and _dims(user) == _dims(result))
        moved = user.opcode in ("get-tuple-element", "bitcast", "transpose", "reshape") or (
            user.opcode == "fusion" and len(user.operands) == 1 and moves_data_only(module, user))
        if same or moved:
            readers += [(u, exact and same) for u in users.get(user.name, []) if u.name not in seen]
    return None


def _vocab_parallel_table(module: HloModule, c: Collective, inputs: tuple[TensorInfo, ...], index: OriginIndex,
                          ) -> TensorInfo | None:
    """The table a forward all-reduce adds the masked gathers of, where it is a vocab-parallel lookup: a gather
    reads the table along the dimension it indexes, split on the summed axes only, and the sum is smaller than
    the table's part on them (gathering the table would move more; a value function's grid read whole, as
    large as its table, is no such design)."""
    ins = module.by_name.get(c.hlo_name)
    if c.kind != "all-reduce" or ins is None or not ins.operands or "transpose(" in (ins.op_name or ""):
        return None
    producer = module.by_name.get(ins.operands[0])
    by_number = {t.index: t for t in inputs}
    summed = {a.split(":")[0] for a in c.mesh_axes}
    for op, number, dims in reads_in(module, producer, index) if producer is not None else ():
        t = by_number.get(number)
        split = {d: {a.split(":")[0] for a in axes} for d, axes in _sharded_dims(t).items()} if t else {}
        if (t is not None and op.opcode == "gather" and dims and set(split) <= set(dims)
                and {a for axes in split.values() for a in axes} == summed and c.bytes < t.per_device_bytes):
            return t
    return None


def _combines(kind: str) -> str:
    """What a collective does with the devices' parts: only a reduction sums them."""
    if kind in ("all-reduce", "reduce-scatter"):
        return "sums the masked partial results"
    if kind == "all-gather":
        return "concatenates what each device read"
    return "moves the shards between devices"


def collective_origins(module: HloModule, collectives: Iterable[Collective], inputs: tuple[TensorInfo, ...],
                       ownership: CodeOwnership, display: Display = where_text) -> tuple[Collective, ...]:
    """Every collective with its ``input_path`` and ``why`` filled in where known;
    ``display`` writes a (source, via) pair as text."""
    index = origin_index(module)
    out = []
    for c in collectives:
        path, why = collective_origin(module, c, inputs, ownership, index, display)
        table = _vocab_parallel_table(module, c, inputs, index) if why and c.intent == "reshard" else None
        if table is not None:  # intended traffic: the layout of the table asks for it, as Megatron designs it
            c = c.model_copy(update={"intent": "activation"})
            why = (f"{why}: the designed reduction of a vocab-parallel lookup ({table.path}'s rows split on "
                   f"{', '.join(c.mesh_axes)}, each device's gather masked to its own; the sum moves less than "
                   "the table's shard would)")
        out.append(c.model_copy(update={"input_path": path, "why": why}) if path or why else c)
    return tuple(out)


def _callers_of_roots(module: HloModule) -> dict[str, list[HloInstruction]]:
    """A loop's, call's or branch's root, to the op that runs it: that op's
    result depends on the root, though the root is not its operand."""
    out: dict[str, list[HloInstruction]] = {}
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.opcode in ("while", "call", "conditional", "async-start"):
                for _, callee in ins.called():
                    callee_comp = module.computations.get(callee)
                    root = next((i for i in callee_comp.instructions if i.is_root), None) if callee_comp else None
                    if root is not None:
                        out.setdefault(root.name, []).append(ins)
    return out


def outputs_depending_on(module: HloModule, names: list[str]) -> dict[int, list[str]]:
    """For each entry output, the collectives among ``names`` it depends on (a
    walk forward from each collective over its users: linear in the program per
    collective, and few collectives have a why)."""
    entry = module.entry_computation
    root = next((i for i in entry.instructions if i.is_root), None)
    if root is None or not names:
        return {}
    outputs = list(root.operands) if root.opcode == "tuple" else [root.name]
    users, callers = module.users(), _callers_of_roots(module)
    found: dict[int, list[str]] = {}
    for name in names:
        seen, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for user in (*users.get(current, ()), *callers.get(current, ())):
                if user.name not in seen:
                    seen.add(user.name)
                    todo.append(user.name)
        for k, out in enumerate(outputs):
            if out in seen or (root.opcode != "tuple" and root.name in seen):
                found.setdefault(k, []).append(name)
    return found


def outputs_returning(module: HloModule, names: Iterable[str]) -> dict[int, list[str]]:
    """For each entry output, the collectives among ``names`` whose result it is, moved only by copies,
    bitcasts and transposes (XLA's wrapped copies) on the way to the ROOT tuple: the collectives that
    put an output on its returned layout, whatever source line their metadata carries."""
    wanted = set(names)
    entry = module.entry_computation
    root = next((i for i in entry.instructions if i.is_root), None)
    if root is None or not wanted:
        return {}
    outputs = list(root.operands) if root.opcode == "tuple" else [root.name]
    found: dict[int, list[str]] = {}
    for k, out in enumerate(outputs):
        ins = module.by_name.get(out)
        for _ in range(MAX_STEPS):
            if ins is None:
                break
            if ins.name in wanted:
                found.setdefault(k, []).append(ins.name)
                break
            if ins.opcode in SAME_DATA and ins.operands:
                ins = module.by_name.get(ins.operands[0])
            elif ins.opcode == "fusion" and len(ins.operands) == 1 and moves_data_only(module, ins):
                ins = module.by_name.get(ins.operands[0])
            else:
                break
    return found


def at_out_shardings(module: HloModule, collectives: Iterable[Collective], outputs: tuple[TensorInfo, ...],
                     stated: frozenset[int], site: SourceLocation | None) -> tuple[Collective, ...]:
    """The collectives with each one XLA inserts to return an output on the layout the jit call's
    out_shardings states for it (its result is that output, moved only by copies: ``outputs_returning``)
    located at that call (``site``, where SL201 and SL202 put what the jit call's options cause), with a why
    naming the output and its stated layout. XLA gives such a collective no line of its own: none (jax 0.10),
    or its operand's (jax 0.12), which is where the value is computed, not why it is moved; so one with no
    line, or a reshard (no stated sharding inside the step asks for it), is the out_shardings'. Without a
    call site or a stated output, the collectives as they were."""
    collectives = tuple(collectives)
    if site is None or not stated:
        return collectives
    candidates = [c.hlo_name for c in collectives if c.source is None or c.intent == "reshard"]
    by_index = {t.index: t for t in outputs}
    returned: dict[str, TensorInfo] = {}
    for k, names in outputs_returning(module, candidates).items():
        if k in stated and k in by_index:
            for name in names:
                returned.setdefault(name, by_index[k])
    if not returned:
        return collectives
    def why(c: Collective, output: TensorInfo) -> str:
        computed = f" (the step computes it sharded over {', '.join(c.mesh_axes)})" if c.kind == "all-gather" else ""
        return (f"{_INSERTED_TO_RETURN}{output.path} as {pspec_text(output.sharding)}{_STATED_BY_OUT_SHARDINGS}"
                f"{computed}")

    return tuple(c if c.hlo_name not in returned else c.model_copy(update={
        "source": site, "via": None, "called_from": None, "why": why(c, returned[c.hlo_name])})
        for c in collectives)


# How at_out_shardings' why reads, around the output and its layout (pinned_output reads it back).
_INSERTED_TO_RETURN = "XLA inserts it to return "
_STATED_BY_OUT_SHARDINGS = ", the layout the jit call's out_shardings states for it"


def pinned_output(c: Collective) -> tuple[str, str] | None:
    """The output and its stated layout (``result[0]['w']``, ``P()``) a collective at_out_shardings located at
    the jit call is inserted to return; None for any other collective."""
    why = c.why or ""
    if not why.startswith(_INSERTED_TO_RETURN) or _STATED_BY_OUT_SHARDINGS not in why:
        return None
    returned = why[len(_INSERTED_TO_RETURN):why.index(_STATED_BY_OUT_SHARDINGS)]
    path, _, layout = returned.rpartition(" as ")
    return (path, layout) if path else None


def _dims(ins: HloInstruction) -> str:
    """An op's shape without its layout: a copy into another layout keeps which dimension is which."""
    return ins.shape.split("{", 1)[0]
