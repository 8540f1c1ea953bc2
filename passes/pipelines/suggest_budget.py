"""The suggest pipeline's decisions after the solve (``SUGGEST``'s stages 8 to 10): the budget loop that
compiles the solver's plans and, when none fits, solves again under a lower argument budget. The solve
and the compiles are the analyzer's callbacks (they edit StableHLO text and run XLA), as
``rewrite.rewrite`` runs ``REWRITE``'s stages around its own.

The budget loop: the solver prices arguments and results only for memory, so each plan is compiled; the
fastest that fits is kept (ties by peak, then solve order). When none fits, the argument budget is lowered
by the smallest excess and the problem solved again, at most ``max_rounds`` times; it ends early when the
lowered budget would be nothing (the plan with the least peak is kept)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..models.suggest import PlanCheck, Version
from .suggest import SUGGEST, Pins, Plan, Refined, model_cost, pins, plan_check

# The analyzer's steps: the solve and refine loop under an argument budget (None: no budget); and each
# (argument pins, result pins) version compiled and measured, in order (its report None where it failed).
SolveUnder = Callable[[int | None], Refined]
CompilePlans = Callable[[list[tuple[Pins, Pins]]], list[tuple[Version, Any]]]


@dataclass(frozen=True)
class CompiledPlan:
    plan: Plan
    version: Version  # with the plan's cost model
    report: Any
    arg_pins: Pins
    res_pins: Pins


@dataclass(frozen=True)
class WithinBudget:
    refined: Refined  # the last round's solves
    kept: CompiledPlan
    checks: list[PlanCheck]  # the last round's plans, in solve order
    rounds: int


def plan_pins(refined: Refined) -> list[tuple[Pins, Pins]]:
    """Stage 8: each plan's (argument pins, result pins)."""
    return SUGGEST.run("plan-pins", lambda: [(pins(p.problem, p.solution.assignment, p.problem.arguments),
                                              pins(p.problem, p.solution.assignment, p.problem.results))
                                             for p in refined.plans])


def _compiled(refined: Refined, measured: list[tuple[Version, Any]], planned: list[tuple[Pins, Pins]]
              ) -> list[CompiledPlan]:
    return [CompiledPlan(plan, version.model_copy(update={"model": model_cost(plan.problem, plan.solution.assignment)}),
                         report, a, r)
            for plan, (version, report), (a, r) in zip(refined.plans, measured, planned)]


def plan_checks(compiled: list[CompiledPlan], input_paths: list[str]) -> list[PlanCheck]:
    """Stage 9: each plan as solved, as propagated and as compiled, in solve order."""
    return SUGGEST.run("plan-checks", lambda: [
        plan_check(c.plan, input_paths, c.version.estimated_seconds, c.version.peak_bytes, c.version.error)
        for c in compiled])


def _budget_round(compiled: list[CompiledPlan], budget: int | None, rounds: int, max_rounds: int
                  ) -> tuple[CompiledPlan | None, int | None]:
    ok = [c for c in compiled if not c.version.error and c.version.estimated_seconds is not None]
    fitting = [c for c in ok if c.version.fits is not False]
    if fitting or not ok or rounds >= max_rounds:
        return min(fitting or ok or compiled, key=lambda c: (
            c.version.estimated_seconds or 0.0, c.version.peak_bytes or 0, c.plan.solve)), None
    least = min(ok, key=lambda c: c.version.peak_bytes or 0)
    over = (least.version.peak_bytes or 0) - (budget or 0)
    if least.plan.solution.memory_bytes - over <= 0:
        return least, None
    return None, least.plan.solution.memory_bytes - over


def budget_round(compiled: list[CompiledPlan], budget: int | None, rounds: int, max_rounds: int
                 ) -> tuple[CompiledPlan | None, int | None]:
    """Stage 10: the plan kept, or (None, the argument budget to solve again under)."""
    return SUGGEST.run("budget-round", _budget_round, compiled, budget, rounds, max_rounds)


def within_budget(budget: int | None, input_paths: list[str], solve_under: SolveUnder, compile_plans: CompilePlans,
                  max_rounds: int) -> WithinBudget:
    """Stages 8 to 10 around the analyzer's solve and compiles, round after round until a plan is kept."""
    arg_budget, rounds = budget, 0
    while True:
        rounds += 1
        refined = solve_under(arg_budget)
        planned = plan_pins(refined)  # 8
        compiled = _compiled(refined, compile_plans(planned), planned)
        checks = plan_checks(compiled, input_paths)  # 9
        kept, arg_budget = budget_round(compiled, budget, rounds, max_rounds)  # 10
        if kept is not None:
            return WithinBudget(refined, kept, checks, rounds)

