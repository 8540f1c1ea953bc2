"""How many trips of its loop take each branch of a ``conditional``, read by evaluating the branch index
over the values of the loop's counter.

A solver runs its costly check under ``lax.cond`` on some trips only: ott's Sinkhorn computes its error
(a 4 GiB all-reduce) on the last of every 10 inner iterations, its predicate a constant flag array read at
the scan's counter (``arange(10) == 9``). Counting every branch once per trip read that all-reduce as run 10
times per outer trip (52 GiB where a trip moves 16 GiB; 812 GiB where 200 iterations move 92; newbie18 F2).
Where the index is computed from the counter, constants and values the loop does not change, it is evaluated
for each counter value (a small interval evaluator: a value XLA does not fix is a range, so ``iteration +
i == 199`` with an unknown outer ``iteration`` is "maybe" while ``flags[i] & (iteration + i >= 0)`` is
certain). A branch is then taken on a known number of trips, or on at least ``certain`` and at most
``possible`` of them where data decides."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..common.shapes import parse_arrays
from .error_paths import is_runtime_check
from .loop_bounds import inferred_trip_count, loop_counter, loop_init, loop_trip_bound
from .module import HloInstruction, HloModule

_MAX_TRIPS = 4096  # counter values evaluated one by one
_MAX_NODES = 256  # instructions one evaluation may visit
_MAX_ELEMENTS = 4096  # elements of an array the evaluator holds
_FULL = (-math.inf, math.inf)
Range = tuple[float, float]  # an element's [low, high]
Value = tuple[tuple[int, ...], list[tuple[float, float]]]  # dims, each element's [low, high]


@dataclass(frozen=True)
class BranchTrips:
    """Per run of the loop around the conditional (its computation's run where no loop is around it):
    ``trips`` runs of the conditional, and per branch (in branch order) the trips certainly taking it and the
    trips that may."""

    trips: int
    taken: tuple[tuple[int, int], ...]


class _Unevaluable(Exception):
    pass


def branch_computations(ins: HloInstruction) -> list[str]:
    """A conditional's branches in index order (a predicate's: true, then false)."""
    called = ins.called()
    branches = [c for a, c in called if a == "branch_computations"]
    if branches:
        return branches
    true, false = ([c for a, c in called if a == key] for key in ("true_computation", "false_computation"))
    return true + false


def branch_trips(module: HloModule, conditional: HloInstruction) -> BranchTrips:
    """Worked out once per conditional: each of its branch computations asks."""
    key = f"branch_trips:{conditional.name}"
    hit = module.derived.get(key)
    if hit is None:
        hit = module.derived[key] = _branch_trips(module, conditional)
    return hit


def _branch_trips(module: HloModule, conditional: HloInstruction) -> BranchTrips:
    n = len(branch_computations(conditional))
    if is_runtime_check(conditional):  # a step that succeeds takes the passing branch; the failing one is error-path
        return BranchTrips(1, ((1, 1),) * n)
    loop = _loop_of(module, module.computation_of(conditional.name) or "")
    counter = loop_counter(module, loop) if loop is not None else None
    trips = None
    if loop is not None and counter is not None:
        trips = loop.known_trip_count()
        trips = inferred_trip_count(module, loop) if trips is None else trips
    if counter is None or trips is None or trips > _MAX_TRIPS:  # one evaluation, the counter a range
        values: list[Value | None] = [None]
        if counter is not None:
            bound = trips if trips is not None else loop_trip_bound(module, loop) if loop is not None else None
            high = math.inf if bound is None else counter[1] + counter[2] * max(bound - 1, 0)
            values = [((), [(counter[1], high)])]
        trips = 1
    else:
        values = [((), [(counter[1] + counter[2] * t,) * 2]) for t in range(trips)]
    certain, possible = [0] * n, [0] * n
    for value in values:
        try:
            chosen = _chosen(module, conditional, n, loop, counter[0] if counter else None, value)
        except (_Unevaluable, ArithmeticError, ValueError, IndexError):
            chosen = set(range(n))
        for b in chosen:
            possible[b] += 1
        if len(chosen) == 1:
            certain[next(iter(chosen))] += 1
    return BranchTrips(trips, tuple(zip(certain, possible)))


def _chosen(module: HloModule, conditional: HloInstruction, n: int, loop: HloInstruction | None,
            index: int | None, counter: Value | None) -> set[int]:
    """The branches this trip may take."""
    ev = _Evaluator(module, loop, index, counter)
    _, [(low, high)] = ev.value(conditional.operands[0], {})
    if parse_arrays(module.by_name[conditional.operands[0]].shape)[0].dtype == "pred":
        return {b for b, v in ((0, 1), (1, 0)) if low <= v <= high}
    if math.isinf(low) or math.isinf(high):
        return set(range(n))
    return {min(max(int(k), 0) if 0 <= k < n else n - 1, n - 1) for k in range(int(low), int(high) + 1)}


def _loop_of(module: HloModule, computation: str) -> HloInstruction | None:
    """The while loop whose body a computation is, when exactly one is."""
    loops = [c for c in module.callers().get(computation, []) if c.opcode == "while"
             and dict(c.called()).get("body") == computation]
    return loops[0] if len(loops) == 1 else None


def _unknown(shape: str) -> Value:
    arrays = parse_arrays(shape)
    if len(arrays) != 1 or math.prod(arrays[0].dims) > _MAX_ELEMENTS:
        raise _Unevaluable(shape)
    element = (0, 1) if arrays[0].dtype == "pred" else _FULL
    return arrays[0].dims, [element] * math.prod(arrays[0].dims)


def _literal(ins: HloInstruction) -> Value:
    arrays = parse_arrays(ins.shape)
    if len(arrays) != 1:
        raise _Unevaluable(ins.name)
    text = ",".join(ins.operands).replace("{", "").replace("}", "")
    words = [w.strip() for w in text.split(",") if w.strip()]
    numbers = [1 if w == "true" else 0 if w == "false" else float(w) if "." in w or "e" in w else int(w)
               for w in words]
    if len(numbers) != math.prod(arrays[0].dims):
        raise _Unevaluable(ins.name)
    return arrays[0].dims, [(x, x) for x in numbers]


def _compare(direction: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[int, int]:
    (al, ah), (bl, bh) = a, b
    certain = {"LT": ah < bl, "LE": ah <= bl, "GT": al > bh, "GE": al >= bh,
               "EQ": al == ah == bl == bh, "NE": ah < bl or al > bh}[direction]
    never = {"LT": al >= bh, "LE": al > bh, "GT": ah <= bl, "GE": ah < bl,
             "EQ": ah < bl or al > bh, "NE": al == ah == bl == bh}[direction]
    return (1, 1) if certain else (0, 0) if never else (0, 1)


def _exact(f: Callable[[Any, Any], Any]) -> Callable[[Range, Range], Range]:
    """An op read only on known elements: a range in, a full range out."""
    return lambda a, b: (f(a[0], b[0]),) * 2 if a[0] == a[1] and b[0] == b[1] else _FULL


def _c_div(x: float, y: float) -> float:
    return int(x / y) if isinstance(x, int) and isinstance(y, int) else x / y


_BINARY: dict[str, Callable[[Range, Range], Range]] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "subtract": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "multiply": _exact(lambda x, y: x * y), "divide": _exact(_c_div),
    "remainder": _exact(lambda x, y: x - y * _c_div(x, y)),
    "and": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])) if {*a, *b} <= {0, 1} else _exact(int.__and__)(a, b),
    "or": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])) if {*a, *b} <= {0, 1} else _exact(int.__or__)(a, b),
    "maximum": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "minimum": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}
_SAME_ELEMENTS = frozenset({"copy", "bitcast", "reshape"})


class _Evaluator:
    def __init__(self, module: HloModule, loop: HloInstruction | None, index: int | None, counter: Value | None):
        self.module, self.loop, self.index, self.counter = module, loop, index, counter
        self.nodes = 0

    def value(self, name: str, params: dict[str, tuple[str, dict[str, Any]]]) -> Value:
        self.nodes += 1
        ins = self.module.by_name.get(name)
        if ins is None or self.nodes > _MAX_NODES:
            raise _Unevaluable(name)
        if ins.opcode == "parameter" and name in params:  # a fusion's parameter: its operand, read when asked
            return self.value(*params[name])
        op, args = ins.opcode, ins.operands
        if op == "constant":
            return _literal(ins)
        dims = parse_arrays(ins.shape)[0].dims if parse_arrays(ins.shape) else ()
        if op == "get-tuple-element":
            return self._tuple_element(ins)
        if op in _SAME_ELEMENTS:
            return dims, self.value(args[0], params)[1]
        if op == "convert":
            _, elements = self.value(args[0], params)
            if parse_arrays(ins.shape)[0].dtype == "pred":
                return dims, [_compare("NE", e, (0, 0)) for e in elements]
            return dims, [(math.trunc(lo) if math.isfinite(lo) else lo, math.trunc(hi) if math.isfinite(hi) else hi)
                          if lo == hi or "f" not in ins.shape.split("[")[0] else (lo, hi) for lo, hi in elements]
        if op == "iota":
            dimension = int(ins.attrs.get("iota_dimension", "0"))
            return dims, [(i, i) for i in _coordinates(dims, dimension)]
        if op == "broadcast":
            src_dims, elements = self.value(args[0], params)
            if src_dims:
                raise _Unevaluable(name)
            return dims, elements * math.prod(dims)
        if op == "not":
            _, elements = self.value(args[0], params)
            return dims, [(1 - hi, 1 - lo) for lo, hi in elements]
        if op == "compare":
            a, b = (self.value(o, params)[1] for o in args)
            return dims, [_compare(ins.attrs.get("direction", ""), x, y) for x, y in _paired(a, b)]
        if op in _BINARY:
            a, b = (self.value(o, params)[1] for o in args)
            return dims, [_BINARY[op](x, y) for x, y in _paired(a, b)]
        if op == "select":
            p, a, b = (self.value(o, params)[1] for o in args)
            out = []
            for (pl, ph), (x, y) in zip(p * (len(a) if len(p) == 1 else 1), _paired(a, b)):
                out.append(x if pl == 1 else y if ph == 0 else (min(x[0], y[0]), max(x[1], y[1])))
            return dims, out
        if op in ("slice", "dynamic-slice"):
            return self._slice(ins, params)
        if op == "fusion":
            fused = self.module.computations.get(next((c for a, c in ins.called() if a == "calls"), ""))
            root = next((i for i in fused.instructions if i.is_root), None) if fused else None
            if root is None or fused is None:
                raise _Unevaluable(name)
            inner = {i.name: (args[int(i.operands[0])], params) for i in fused.instructions
                     if i.opcode == "parameter" and i.operands and i.operands[0].isdigit()}
            return self.value(root.name, inner)
        raise _Unevaluable(f"{name}: {op}")

    def _slice(self, ins: HloInstruction, params: dict[str, tuple[str, dict[str, Any]]]) -> Value:
        src_dims, elements = self.value(ins.operands[0], params)
        if len(src_dims) != 1:
            raise _Unevaluable(ins.name)
        if ins.opcode == "slice":
            start, stop, *step = (int(x) for x in ins.attrs.get("slice", "").strip("{}[]").split(":"))
            picked = elements[start:stop:step[0] if step else 1]
            return (len(picked),), picked
        size = int(ins.attrs.get("dynamic_slice_sizes", "").strip("{}"))
        low, high = self.value(ins.operands[1], params)[1][0]
        if math.isinf(low) or math.isinf(high):
            starts = list(range(0, src_dims[0] - size + 1))
        else:  # XLA clamps the start into the array
            starts = sorted({min(max(int(s), 0), src_dims[0] - size) for s in range(int(low), int(high) + 1)})
        windows = [elements[s:s + size] for s in starts]
        return (size,), [(min(w[k][0] for w in windows), max(w[k][1] for w in windows)) for k in range(size)]

    def _tuple_element(self, ins: HloInstruction) -> Value:
        """An element of a loop's carry: the counter this trip, a value the loop passes on unchanged (read where
        the loop starts), another loop's counter (its range), or a value data decides."""
        k = int(ins.attrs.get("index", "-1"))
        source = self.module.by_name.get(ins.operands[0])
        computation = self.module.computation_of(ins.name) or ""
        loop = _loop_of(self.module, computation)
        if source is None or source.opcode != "parameter" or loop is None:
            return _unknown(ins.shape)
        if loop is self.loop and k == self.index and self.counter is not None:
            return self.counter
        body = self.module.computations[computation]
        root = next((i for i in body.instructions if i.is_root), None)
        passed = self.module.by_name.get(root.operands[k]) if root is not None and k < len(root.operands) else None
        if passed is not None and passed.opcode == "get-tuple-element" and passed.operands[0] == source.name \
                and passed.attrs.get("index") == str(k):
            start = loop_init(self.module, loop)
            if start is not None and start.opcode == "tuple" and k < len(start.operands):
                return self.value(start.operands[k], {})
        counter = loop_counter(self.module, loop)
        if counter is not None and counter[0] == k and counter[2] > 0:
            trips = loop.known_trip_count() or inferred_trip_count(self.module, loop) \
                or loop_trip_bound(self.module, loop)
            return (), [(counter[1], math.inf if trips is None else counter[1] + counter[2] * max(trips - 1, 0))]
        return _unknown(ins.shape)


def _paired(a: list[Any], b: list[Any]) -> list[Any]:
    if len(a) == len(b):
        return list(zip(a, b))
    if len(a) == 1:
        return [(a[0], y) for y in b]
    if len(b) == 1:
        return [(x, b[0]) for x in a]
    raise _Unevaluable("shapes")


def _coordinates(dims: tuple[int, ...], dimension: int) -> list[int]:
    """Each element's coordinate along one dimension, row-major."""
    inner = math.prod(dims[dimension + 1:])
    return [(flat // inner) % dims[dimension] for flat in range(math.prod(dims))]
