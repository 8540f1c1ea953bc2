"""How many times each value of a StableHLO module is computed per call: the
trip counts of the ``while`` loops around it (``scan`` and ``fori_loop`` lower
to a loop whose condition compares a counter that starts at a constant with a
constant bound), multiplied through nesting. A loop whose count cannot be read
counts once. A function runs once per run of each place that calls it."""

from __future__ import annotations

from typing import Any

from jaxlib.mlir import ir

from .module import entry_function, functions

_COMPARISON = {"LT": lambda lo, hi: hi - lo, "LE": lambda lo, hi: hi - lo + 1,
               "GT": lambda lo, hi: lo - hi, "GE": lambda lo, hi: lo - hi + 1,
               "NE": lambda lo, hi: abs(hi - lo)}


def _constant_int(value: ir.Value[Any]) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or not hasattr(owner, "name") or owner.name != "stablehlo.constant":
        return None
    try:
        attr = ir.DenseIntElementsAttr(owner.attributes["value"])
    except (ValueError, TypeError):
        return None
    return int(attr[0]) if len(attr) == 1 else None


def trip_count(op: ir.OpView) -> int | None:
    """A ``stablehlo.while``'s iterations, when its condition is ``counter <cmp> bound``."""
    cond = op.regions[0].blocks[0]
    ops = list(cond.operations)
    if not ops or ops[-1].name != "stablehlo.return":
        return None
    cmp = ops[-1].operands[0].owner
    if isinstance(cmp, ir.Block) or not hasattr(cmp, "name") or cmp.name != "stablehlo.compare":
        return None
    direction = str(cmp.attributes["comparison_direction"]).split()[-1].rstrip(">")
    lhs, rhs = cmp.operands[0], cmp.operands[1]
    if not isinstance(lhs, ir.BlockArgument):
        return None
    start = _constant_int(op.operands[ir.BlockArgument(lhs).arg_number])
    bound = _constant_int(rhs)
    if start is None or bound is None or direction not in _COMPARISON:
        return None
    return max(0, int(_COMPARISON[direction](start, bound)))


def value_repeats(module: ir.Module, value_ids: dict[ir.Value[Any], int]) -> dict[int, int]:
    """Tensor id -> runs per call, for values defined inside loops (others run once).
    A function runs as many times as its call sites do, summed over them: JAX puts
    a scan's body in functions (``closed_call``, ``dynamic_index_in_dim``) that the
    loop calls, and those run once per iteration."""
    funcs = functions(module)
    calls: dict[str, list[tuple[str, int]]] = {name: [] for name in funcs}
    local: dict[str, dict[int, int]] = {name: {} for name in funcs}  # runs per run of its function

    def walk(block: ir.Block, times: int, func: str) -> None:
        for op in block.operations:
            for r in op.results:
                tid = value_ids.get(r)
                if tid is not None:
                    local[func][tid] = times
            if op.name == "func.call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee in funcs:
                    calls[func].append((callee, times))
            inner = times * max(1, trip_count(op) or 1) if op.name == "stablehlo.while" else times
            for region in op.regions:
                for b in region.blocks:
                    walk(b, inner, func)

    for name, fn in funcs.items():
        walk(fn.regions[0].blocks[0], 1, name)
    runs = _function_runs(funcs, calls, entry_function(module))
    out: dict[int, int] = {}
    for name, values in local.items():
        scale = max(1, runs.get(name, 1))
        out.update({tid: times * scale for tid, times in values.items() if times * scale > 1})
    return out


def _function_runs(funcs: dict[str, ir.OpView], calls: dict[str, list[tuple[str, int]]], entry: ir.OpView,
                   ) -> dict[str, int]:
    """Runs per call of the entry, callers before callees (Kahn's order over the call
    graph; a function on a call cycle, which StableHLO does not produce, runs once)."""
    callers = {name: 0 for name in funcs}
    for name in funcs:
        for callee, _ in calls[name]:
            callers[callee] += 1
    entry_name = ir.StringAttr(entry.operation.attributes["sym_name"]).value
    runs = {name: (1 if name == entry_name else 0) for name in funcs}
    ready = [n for n in funcs if callers[n] == 0]
    while ready:
        name = ready.pop()
        for callee, times in calls[name]:
            runs[callee] += runs[name] * times
            callers[callee] -= 1
            if callers[callee] == 0:
                ready.append(callee)
    return runs


def entry_results(module: ir.Module, value_ids: dict[ir.Value[Any], int]) -> list[int | None]:
    """The tensor id each result of the entry function returns."""
    block = entry_function(module).regions[0].blocks[0]
    ret = list(block.operations)[-1]
    return [value_ids.get(v) for v in ret.operands]
