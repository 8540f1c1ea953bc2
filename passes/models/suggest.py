"""Result models of ``suggest``: the shardings a solver chose for a target's
arguments and results, how it chose them, and what compiling them showed
beside the user's own shardings and simple baselines."""

from __future__ import annotations

from pydantic import Field

from .report import Model, RunHeader


class ChosenSharding(Model):
    """One flattened argument or result: the user's sharding and the suggested one."""

    index: int
    path: str
    shape: list[int]
    dtype: str
    current: list[list[str]] | None = Field(description="Mesh axes per dimension as the program states them.")
    suggested: list[list[str]]
    current_per_device_bytes: int
    suggested_per_device_bytes: int
    pinned: str | None = Field(default=None, description="Why the solver did not choose it (--fix, ...).")


class ModelCost(Model):
    """The solver's cost model on one assignment, in seconds per step (one device)."""

    seconds: float
    compute_seconds: float = Field(description="FLOPs and bytes over the device peaks, divided by parallelism.")
    reduction_seconds: float = Field(description="All-reduces of partial sums over sharded reduction factors.")
    reshard_seconds: float = Field(description="All-gathers and all-to-alls between producers and consumers.")


class Version(Model):
    """One set of argument and result shardings, compiled."""

    name: str = Field(description="solver, written (the program's own), replicated, data-parallel, fsdp, single "
                      "move (the best compiled move of one mesh axis from the written shardings).")
    description: str
    peak_bytes: int | None = Field(description="XLA's per-device peak of the compiled program.")
    fits: bool | None = Field(description="Peak within the budget; null without a budget.")
    collective_bytes: int | None = Field(description="Per-device collective bytes per step.")
    collective_count: int | None
    traffic_bytes: int | None = Field(default=None, description="Per-device bytes a step moves: its collectives, "
                                      "and the state outputs the next step reshards on entry (lint's fix checks' "
                                      "traffic); null where it did not compile.")
    estimated_seconds: float | None = Field(description="The step-time estimate of the compiled program.")
    model: ModelCost | None = Field(default=None, description="The solver's cost model on this version's "
                                    "arguments (the solver's best intermediates for them).")
    error: str | None = Field(default=None, description="Why it did not compile.")
    rematerialized: list[str] = Field(
        default_factory=list, description="What XLA replicates in full to compile this version that the program "
        "as written does not make it do (SL104's words): such a version ranks below every other, as lint's fix "
        "check ranks such a fix (never better), and is suggested only where nothing else compiled.")


class PlanCheck(Model):
    """One solve of the loop that checks plans against propagation."""

    solve: int
    objective_seconds: float = Field(description="The plan, priced by the cost model.")
    propagated_seconds: float | None = Field(description="The layout propagation reaches from the plan's "
                                             "arguments, priced by the same model; null where not matched.")
    differing_values: int | None = Field(description="Value groups where propagation and plan disagree.")
    excluded: list[str] = Field(description="Argument shardings this solve was not offered: \"path: no 'axis' "
                                "on dimension d\".")
    estimated_seconds: float | None = Field(description="The step-time estimate of the compiled plan.")
    peak_bytes: int | None
    error: str | None = None


class SolverStats(Model):
    method: str = Field(description="lp (integral): the LP relaxation's optimum was integral, so it is the "
                        "ILP's; lp (rounded): rounded to within 1e-6 of the LP bound; ilp: the MILP, run where "
                        "the LP was fractional; ilp (node limit): the MILP's incumbent after its node count "
                        "(deterministic); ilp (time limit); local search.")
    variables: int
    untied_variables: int | None = Field(default=None, description="The problem's size before repeated layers "
                                         "were tied (one strategy per repeated position); null: not tied.")
    tied_by: list[str] = Field(default_factory=list, description="How the problem was tied, in order: "
                               "\"symmetry\" (groups and ops colour refinement finds alike share one choice; the "
                               "LP bound is still the untied problem's), \"repeats\" (repeated runs of ops; a "
                               "restriction, the LP bound is the tied problem's); empty: not tied.")
    value_groups: int
    ops: int
    objective_seconds: float
    lower_bound_seconds: float | None
    gap: float | None = Field(description="(objective - lower bound) / objective; null for the local search.")
    lp_bound_seconds: float | None = Field(default=None, description="The LP relaxation's optimum: no plan of "
                                           "the problem costs less (of the tied problem only, where tied_by "
                                           "has \"repeats\").")
    certified_gap: float | None = Field(default=None, description="(objective - LP bound) / LP bound: how far "
                                        "above the cost model's optimum the plan can be, at most (of the model: the "
                                        "compiled versions' figures are XLA's); null without an LP bound.")
    rounds: int = Field(description="Budget rounds: the first, plus one per budget tightening after a "
                        "verified peak exceeded the budget.")
    plans: list[PlanCheck] = Field(default_factory=list, description="Every solve of the last round, in order: "
                                   "after each, the plan's argument shardings are propagated, and the ones "
                                   "propagation carried where the plan did not want them are excluded before the "
                                   "next; each plan is compiled and the fastest that fits is the solver's version.")
    kept: int = Field(default=1, description="The solve whose plan is the solver's version.")


class LogicalRuleChange(Model):
    """One logical axis rule the suggestion changes."""

    logical: str
    written: list[str] | None = Field(description="The mesh axes the script's rules give it; null: no rule.")
    suggested: list[str] = Field(description="The mesh axes the suggestion puts on the dimensions it names.")
    dimensions: int = Field(description="Argument dimensions named by it.")


class LogicalRuleAdvice(Model):
    """For code that shards through logical axis names: the rules that give the suggestion."""

    rules_text: str = Field(description="The new rules, Python (the script's, with the changes).")
    changes: list[LogicalRuleChange]
    reached: int = Field(description="Arguments whose suggested sharding the new rules give (resolved by Flax).")
    covered: int = Field(description="Arguments with logical names.")
    exceptions: list[str] = Field(default_factory=list, description="Arguments the new rules do not give their "
                                  "suggestion: they would need a logical name of their own.")


class SuggestReport(Model):
    name: str
    platform: str
    device: str | None = Field(description="The device model the costs use.")
    mesh: list[tuple[str, int]]
    free_axes: list[str]
    budget_bytes: int | None
    chosen: str = Field(description="The version suggested: the fastest compiled one that fits (the solver's, a "
                        "baseline, or 'written' when nothing compiled faster than the program's own shardings); "
                        "one within 1% of that time with a peak at least 10% lower wins over it.")
    arguments: list[ChosenSharding]
    results: list[ChosenSharding]
    solver: SolverStats
    versions: list[Version] = Field(description="Compiled: the solver's choice, the written program, then baselines.")
    in_shardings_text: str | None = Field(description="Checked Python for jax.jit(..., in_shardings=...).")
    out_shardings_text: str | None
    placement_text: str | None = Field(
        default=None, description="On Explicit mesh axes, where a sharding is part of an input's type and jit refuses "
        "in_shardings its inputs do not have, and for a target lowered with keyword arguments (jit takes no "
        "in_shardings with them; in_shardings_text is then null): checked Python that places the inputs on the "
        "suggested shardings (jax.device_put with the in_shardings tuple).")
    abstract_inputs_text: str | None = Field(
        default=None, description="Checked Python defining with_shardings, which gives abstract inputs "
        "(jax.ShapeDtypeStruct carrying a sharding) the suggested shardings, for .lower(*with_shardings(...)); it "
        "maps over a variable in_shardings bound to in_shardings_text. jit refuses in_shardings that differ from "
        "the sharding an argument carries.")
    jit_options_text: str | None = Field(
        default=None, description="The program's own jit options to keep in the pasted jax.jit "
        "(donate_argnames=... for the arguments it donates).")
    logical_rules: LogicalRuleAdvice | None = Field(
        default=None, description="Where the script names its logical axes (shard_lint_logical_axes): the rules "
        "to change.")
    text_problem: str | None = Field(default=None, description="Why no text is shown.")
    function_name: str | None = Field(
        default=None, description="The function jit lowered, as the pasted jax.jit(...) names it; null where JAX "
        "records no name a user can write (a lambda): the text then says step.")
    verdict: str
    notes: list[str] = Field(default_factory=list)


class SuggestRun(RunHeader):
    command: str = "suggest"
    targets: list[SuggestReport]
