"""What each operation of a compiled HLO module computes and moves, per device:
the matmul FLOPs of every dot and convolution (inside fusions too) and the bytes
each top-level operation reads and writes. The step-time estimate prices these
against a device's peaks (a roofline per operation).

Counted where the program runs them: the entry computation, while bodies (times
XLA's ``known_trip_count``), conditional branches (each, an upper bound), calls
and async wrappers. Collectives are left to ``hlo/collectives.py``; bookkeeping ops
(parameters, tuples, bitcasts, the done half of async pairs) move nothing.

Bytes are what an op touches, not the whole of its operands: a slice reads its
result's worth, an in-place dynamic-update-slice writes its update's, and a
fusion operand read only through slices counts the slices. Elementwise FLOPs
are not counted: on every accelerator they hide under the op's memory time.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from math import prod
from typing import Any

from ..common.shapes import ArrayShape, parse_arrays
from .collectives import collective_kind, computation_multiplicity
from .module import MAIN_THREAD, HloComputation, HloInstruction, HloModule

# Ops that move no bytes of their own.
_FREE = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
    "replica-id", "opt-barrier", "while", "conditional", "call", "call-start", "async-start", "async-update",
    "async-done", "copy-done", "send-done", "recv-done", "add-dependency", "domain",
})
_SLICING = frozenset({"slice", "dynamic-slice", "gather"})
# Attributes through which a computation runs as part of the program (not fused).
_PROGRAM_ATTRS = frozenset({"body", "condition", "branch_computations", "true_computation",
                            "false_computation"})
# An async call runs its computation on another execution thread (libtpu 0.0.50's SparseCore
# gathers: ``call-start(...), async_execution_thread="sparsecore", to_apply=...``).
_PROGRAM_CALLERS = frozenset({"call", "async-start", "call-start"})
_DIMS = re.compile(r"\d+")


@dataclass(frozen=True)
class OpCost:
    """One top-level operation: per execution, and how often a step runs it."""

    name: str
    opcode: str
    runs: int
    bytes: int
    flops_by_dtype: tuple[tuple[str, float], ...] = ()
    thread: str = MAIN_THREAD  # the execution thread of its computation ("sparsecore": a TPU's SparseCores)

    @property
    def flops(self) -> float:
        return sum(f for _, f in self.flops_by_dtype)


@dataclass(frozen=True)
class ProgramCost:
    ops: tuple[OpCost, ...]
    unknown_custom_calls: tuple[str, ...] = field(default=())
    # Ops in loops whose trip count XLA does not know, each counted as if its loop ran once (no --loop-trips).
    counted_once: int = 0

    @property
    def flops(self) -> float:
        return sum(o.flops * o.runs for o in self.ops)

    @property
    def bytes(self) -> int:
        return sum(o.bytes * o.runs for o in self.ops)


@functools.lru_cache(maxsize=1 << 16)
def _parsed(shape: str) -> tuple[ArrayShape, ...]:
    return tuple(parse_arrays(shape))  # a step repeats the same few shapes thousands of times


@functools.lru_cache(maxsize=1 << 16)
def _shape_bytes(shape: str) -> int:
    return sum(a.nbytes for a in _parsed(shape))


def _arrays(module: HloModule, name: str) -> tuple[ArrayShape, ...]:
    ins = module.by_name.get(name)
    return _parsed(ins.shape) if ins is not None else ()


def _operand_bytes(module: HloModule, name: str) -> int:
    ins = module.by_name.get(name)
    return _shape_bytes(ins.shape) if ins is not None else 0


def _first_array(shape: str) -> ArrayShape | None:
    arrays = _parsed(shape)
    return arrays[0] if arrays else None


def _dims(text: str | None) -> tuple[int, ...]:
    return tuple(int(d) for d in _DIMS.findall(text or ""))


def _matmul_dtype(dtype: str) -> str:
    """The peak-table key for a dot's operand element type."""
    if dtype.startswith("f8"):
        return "f8"
    if dtype in ("s8", "u8", "s4", "u4"):
        return "s8"
    return dtype if dtype in ("f64", "f32", "bf16", "f16") else "f32"


def dot_flops(module: HloModule, ins: HloInstruction) -> tuple[str, float] | None:
    """2 x result elements x contracted size, for a dot or convolution."""
    out = _first_array(ins.shape)
    if out is None or len(ins.operands) < 2:
        return None
    lhs = _arrays(module, ins.operands[0])
    rhs = _arrays(module, ins.operands[1])
    if not lhs or not rhs:
        return None
    if ins.opcode == "dot":
        contracted = prod(lhs[0].dims[d] for d in _dims(ins.attrs.get("lhs_contracting_dims"))
                          if d < len(lhs[0].dims))
    else:  # convolution: the kernel's input features times its spatial window
        labels = ins.attrs.get("dim_labels", "")
        kernel = labels.split("_")[1].split("->")[0] if "_" in labels else ""
        if len(kernel) != len(rhs[0].dims):
            return None
        contracted = prod(size for label, size in zip(kernel, rhs[0].dims) if label != "o")
    return _matmul_dtype(lhs[0].dtype), 2.0 * prod(out.dims) * contracted


def _gemm_custom_call_flops(module: HloModule, ins: HloInstruction) -> tuple[str, float] | None:
    """cuBLAS/cuBLASLt GEMM custom calls carry their dot dimensions in the backend config."""
    cfg = ins.backend_config().get("gemm_backend_config")
    if not isinstance(cfg, dict) or len(ins.operands) < 2:
        return None
    numbers = cfg.get("dot_dimension_numbers", {})
    lhs = _arrays(module, ins.operands[0])
    out = _first_array(ins.shape)
    if not lhs or out is None:
        return None
    contracted = prod(lhs[0].dims[int(d)] for d in numbers.get("lhs_contracting_dimensions", [])
                      if int(d) < len(lhs[0].dims))
    return _matmul_dtype(lhs[0].dtype), 2.0 * prod(out.dims) * contracted


class _FusedComputations:
    """Per fused computation (memoised): its matmul FLOPs, and how each of its
    parameters is read (whole, or only through slices of some size)."""

    def __init__(self, module: HloModule):
        self.module = module
        self._flops: dict[str, dict[str, float]] = {}
        self._reads: dict[str, tuple[dict[int, int], int | None]] = {}

    def flops(self, name: str, stack: tuple[str, ...] = ()) -> dict[str, float]:
        hit = self._flops.get(name)
        if hit is not None:
            return hit
        comp = self.module.computations.get(name)
        total: dict[str, float] = {}
        if comp is not None and name not in stack:
            for ins in comp.instructions:
                found = dot_flops(self.module, ins) if ins.opcode in ("dot", "convolution") else None
                if found is not None:
                    total[found[0]] = total.get(found[0], 0.0) + found[1]
                for attr, callee in ins.called():
                    if attr in ("calls", "called_computations"):
                        for k, v in self.flops(callee, stack + (name,)).items():
                            total[k] = total.get(k, 0.0) + v
        self._flops[name] = total
        return total

    def reads(self, name: str) -> tuple[dict[int, int], int | None]:
        """(bytes read per parameter read only through slices; the update bytes when
        the root updates a parameter in place)."""
        hit = self._reads.get(name)
        if hit is not None:
            return hit
        comp = self.module.computations.get(name)
        sliced: dict[int, int] = {}
        in_place: int | None = None
        if comp is not None:
            sliced, in_place = _parameter_reads(self.module, comp)
        self._reads[name] = (sliced, in_place)
        return sliced, in_place


def _parameter_reads(module: HloModule, comp: HloComputation) -> tuple[dict[int, int], int | None]:
    params: dict[str, int] = {}
    for ins in comp.instructions:
        if ins.opcode == "parameter" and ins.operands:
            try:
                params[ins.name] = int(ins.operands[0])
            except ValueError:
                continue
    users = module.users()  # names are unique in a module: a parameter's users are its computation's
    sliced: dict[int, int] = {}
    for pname, index in params.items():
        uses = users.get(pname, [])
        if uses and all(u.opcode in _SLICING and u.operands and u.operands[0] == pname for u in uses):
            sliced[index] = sum(_shape_bytes(u.shape) for u in uses)
    in_place = None
    root = next((i for i in comp.instructions if i.is_root), None)
    if root is not None and root.opcode == "dynamic-update-slice" and len(root.operands) > 1 \
            and root.operands[0] in params:
        update = module.by_name.get(root.operands[1])
        if update is not None:
            in_place = _shape_bytes(update.shape)
            sliced[params[root.operands[0]]] = 0
    return sliced, in_place


def _program_computations(module: HloModule) -> set[str]:
    """The entry and every computation it runs as part of the program (loop
    bodies, branches, calls, async wrappers), not fused or applied ones."""
    found = {module.entry}
    todo = [module.entry]
    while todo:
        comp = module.computations.get(todo.pop())
        if comp is None:
            continue
        for ins in comp.instructions:
            for attr, callee in ins.called():
                runs_as_program = attr in _PROGRAM_ATTRS or (
                    ins.opcode in _PROGRAM_CALLERS and attr in ("calls", "to_apply"))
                if runs_as_program and callee not in found:
                    found.add(callee)
                    todo.append(callee)
    return found


def _op_cost(module: HloModule, ins: HloInstruction, fused: _FusedComputations,
             unknown: list[str]) -> tuple[int, dict[str, float]] | None:
    opcode = ins.opcode
    if opcode in _FREE or collective_kind(opcode) or opcode.endswith("-done"):
        return None
    result = _shape_bytes(ins.shape)
    flops: dict[str, float] = {}
    if opcode in _SLICING:
        return 2 * result, flops
    if opcode == "dynamic-update-slice" and len(ins.operands) > 1:
        return 2 * _operand_bytes(module, ins.operands[1]), flops
    operand_bytes = [_operand_bytes(module, op) for op in ins.operands]
    if opcode in ("dot", "convolution"):
        found = dot_flops(module, ins)
        if found is not None:
            flops[found[0]] = found[1]
    elif opcode == "fusion":
        callee = next((c for a, c in ins.called() if a == "calls"), None)
        if callee is not None:
            flops = dict(fused.flops(callee))
            sliced, in_place = fused.reads(callee)
            # A parameter read only through slices or gathers reads those parts, and never more than
            # the whole of it: gathers that read an element again (an interpolation's two corners at
            # every query point) find it in cache, not HBM.
            operand_bytes = [min(sliced.get(k, b), b) for k, b in enumerate(operand_bytes)]
            if in_place is not None:
                result = in_place
    elif opcode == "custom-call":
        found = _gemm_custom_call_flops(module, ins)
        if found is not None:
            flops[found[0]] = found[1]
        else:
            target = ins.attrs.get("custom_call_target", "?").strip('"')
            called = [c for a, c in ins.called() if a == "called_computations"]
            for callee in called:  # cuDNN fusions and the like keep their dots in a computation
                for k, v in fused.flops(callee).items():
                    flops[k] = flops.get(k, 0.0) + v
            if not called and re.search(r"gemm|matmul|conv", target, re.I):
                unknown.append(target)
    return result + sum(operand_bytes), flops


def program_cost(module: HloModule, assumed_trips: int | None = None) -> ProgramCost:
    """``assumed_trips``: the user's count for loops whose trip count XLA does not know (``--loop-trips``)."""
    multiplicity = computation_multiplicity(module, assumed_trips)
    counts = multiplicity.counts
    once = multiplicity.unknown if assumed_trips is None else frozenset()
    fused = _FusedComputations(module)
    unknown: list[str] = []
    ops: list[OpCost] = []
    counted_once = 0
    for name in sorted(_program_computations(module)):
        comp = module.computations.get(name)
        runs = counts.get(name, 0)
        if comp is None or runs == 0:
            continue
        for ins in comp.instructions:
            cost = _op_cost(module, ins, fused, unknown)
            if cost is None:
                continue
            nbytes, flops = cost
            ops.append(OpCost(ins.name, ins.opcode, runs, nbytes, tuple(sorted(flops.items())),
                              comp.execution_thread))
            counted_once += name in once
    return ProgramCost(tuple(ops), tuple(sorted(set(unknown))), counted_once)


def xla_cost_figures(raw: dict[str, Any] | None) -> dict[str, float]:
    """The totals of XLA's own ``cost_analysis()`` worth keeping (flops, bytes
    accessed, and the TPU compiler's ``optimal_seconds``), as plain floats."""
    out: dict[str, float] = {}
    for key, name in (("flops", "flops"), ("bytes accessed", "bytes_accessed"),
                      ("optimal_seconds", "optimal_seconds")):
        value = (raw or {}).get(key)
        if isinstance(value, (int, float)) and value == value and value >= 0:
            out[name] = float(value)
    return out
