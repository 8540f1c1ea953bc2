"""Collectives on the path a runtime check takes when it fails, and the gathers its other path makes.

equinox's ``eqx.error_if`` (which diffrax, optimistix and lineax call on every solve: ``throw=True`` by
default) lowers to a ``conditional``: one branch returns the checked value unchanged, the other calls back to
the host (a ``pure_callback`` that raises) and returns the callback's result. A host callback runs on device
0, so XLA broadcasts its result to every device with an all-reduce in that branch, and gives the
conditional's result the whole value: the branch that returns the value unchanged gathers it whole too. Both
collectives carry no line of their own.

The first runs only when the check fails (the step then raises): it is not traffic of a step that succeeds,
and no layout change removes it. Its intent is ``error-path``. The second runs every step; its ``why`` says
the check causes it, so the rule that reports it says what to change (a layout for the checked value's
output, or the check).

Linear in the program: each computation is visited once to learn whether it calls back to the host, and
once more to learn whether a step that takes no failing branch can reach it.
"""

from __future__ import annotations

from ..models.report import ERROR_PATH, Collective
from .module import HloInstruction, HloModule

# The op_name equinox's check lowers under (``jit(branched_error_if_impl)/cond``; ``error_if`` names it too).
_CHECK_NAME = "error_if"
_BRANCH_ATTRS = frozenset({"branch_computations", "true_computation", "false_computation"})
# The text a gather's why starts with where the check makes it (the replicating-collective rule reads it).
CHECKED_VALUE_GATHER = "the value equinox's error_if checks is returned whole"


def is_host_callback(ins: HloInstruction) -> bool:
    """A custom-call to the host (``xla_ffi_python_cpu_callback``, ``xla_python_gpu_callback``, ...)."""
    return ins.opcode == "custom-call" and "callback" in ins.attrs.get("custom_call_target", "")


def is_runtime_check(ins: HloInstruction) -> bool:
    """A conditional equinox's check lowers to (its op_name says ``error_if``)."""
    return ins.opcode == "conditional" and _CHECK_NAME in (ins.op_name or "")


def _check_conditionals(module: HloModule) -> list[HloInstruction]:
    return [ins for comp in module.computations.values() for ins in comp.instructions if is_runtime_check(ins)]


def _calls_host(module: HloModule) -> dict[str, bool]:
    """Computation name -> whether it, or anything it calls, calls back to the host (memoised, iterative)."""
    memo: dict[str, bool] = {}
    for start in module.computations:
        stack = [(start, False)]
        while stack:
            name, expanded = stack.pop()
            if name in memo:
                continue
            comp = module.computations.get(name)
            if comp is None:
                memo[name] = False
                continue
            callees = [c for ins in comp.instructions for _, c in ins.called() if c in module.computations]
            if not expanded:
                stack.append((name, True))
                stack.extend((c, False) for c in callees if c not in memo)
                continue
            memo[name] = (any(is_host_callback(ins) for ins in comp.instructions)
                          or any(memo.get(c, False) for c in callees))
    return memo


def _reachable(module: HloModule, roots: list[str], avoid: set[str]) -> set[str]:
    seen: set[str] = set()
    stack = [r for r in roots if r not in avoid]
    while stack:
        name = stack.pop()
        if name in seen or name in avoid or name not in module.computations:
            continue
        seen.add(name)
        stack.extend(c for ins in module.computations[name].instructions for _, c in ins.called())
    return seen


def error_branches(module: HloModule) -> tuple[set[str], set[str]]:
    """(the computations only a failing check's branch runs, the computations the branches that return the
    checked value run)."""
    checks = _check_conditionals(module)
    if not checks:
        return set(), set()
    host = _calls_host(module)
    failing: list[str] = []
    passing: list[str] = []
    for cond in checks:
        branches = [c for attr, c in cond.called() if attr in _BRANCH_ATTRS]
        calling = [b for b in branches if host.get(b, False)]
        if not calling or len(calling) == len(branches):
            continue  # no branch, or every branch, calls the host: not a check's two paths
        failing += calling
        passing += [b for b in branches if b not in calling]
    # What a step whose checks all pass can run: everything reachable from ENTRY without entering a failing
    # branch. A computation both reach (a reducer, a shared helper) is not the failing path's alone.
    normal = _reachable(module, [module.entry], set(failing))
    only_failing = _reachable(module, failing, set()) - normal
    return only_failing, _reachable(module, passing, set(failing))


def mark_error_paths(collectives: tuple[Collective, ...], module: HloModule) -> tuple[Collective, ...]:
    """Each collective only a failing check runs, with intent ``error-path``; a gather the check's passing
    branch makes, with a why that says so (its line is the check's already: the collective's site)."""
    failing, passing = error_branches(module)
    if not failing and not passing:
        return collectives
    out = []
    for c in collectives:
        comp = module.computation_of(c.hlo_name)
        if comp in failing:
            c = c.model_copy(update={"intent": ERROR_PATH, "why": c.why or (
                "it runs only when equinox's error_if check fails (the step then raises): it broadcasts the "
                "host callback's result from device 0")})
        elif comp in passing and c.kind == "all-gather" and c.intent == "reshard" and not c.why:
            c = c.model_copy(update={"why": (
                f"{CHECKED_VALUE_GATHER} on every device: the check's other branch returns it from a host "
                "callback on device 0, so XLA makes the check's result whole and this branch, which returns the "
                "value unchanged, gathers it (a solver's throw=False, or EQX_ON_ERROR=nan, leaves the check out)")})
        out.append(c)
    return tuple(out)
