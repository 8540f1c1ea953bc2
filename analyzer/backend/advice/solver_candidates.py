"""The candidate layouts the solver fixes compile for a finding's arguments (``advice.solver_fixes``).

Each candidate is the arguments it changes (index -> sharding), every other argument as written: the
sharding solver's choice with the finding's arguments free (the same problem ``suggest`` solves, restricted:
every other argument and every result the program states held to its written sharding), the first
``MAX_MOVES`` single moves of a mesh axis among those arguments (``advice.moves``), and the finding's
arguments given the layout the compiled step returns them in (SL201's recommendation for such a value).
Nothing here compiles; ``solver_fixes`` compiles and judges them.
"""

from __future__ import annotations

from ....passes.common.sharding_text import normalized
from ....passes.models.errors import NoFeasibleSharding
from ....passes.models.report import Finding, TargetReport, TensorInfo
from ....passes.pipelines.suggest import ShardingProblem, restrict_groups
from ....passes.pipelines.suggest import pins as plan_pins
from ..parameter_moves import matcher, mirrors
from .baselines import NAMES, baseline_layouts
from .moves import single_moves
from .problem import refine

# Single moves compiled per argument set (suggest compiles up to advice.moves.MAX_MOVES over all arguments).
MAX_MOVES = 3
# Seconds one restricted solve may take (the problem has only the finding's arguments free).
TIME_LIMIT = 10.0

Sharding = list[list[str]]
# The candidate that gives the finding's arguments the layout the compiled step returns them in.
RETURNED = "the layout the step returns them in"
# suggest's baseline versions' names (advice.baselines), as candidates for a finding's arguments.
BASELINES = NAMES


def named_units(f: Finding, inputs: list[TensorInfo]) -> list[list[int]]:
    """The arguments a finding names, each with what moves with it (one unit, its first the one the
    finding names): every layer of a ``[*]`` pattern, and the optimizer state that mirrors each
    (parameter_moves.mirrors), as the rule's own fix moves them."""
    units: list[list[int]] = []
    for parameter in f.parameters or ([f.parameter] if f.parameter else []):
        whole = matcher(parameter)
        named = [t.index for t in inputs if whole.match(t.path)]
        if not named:
            continue
        moved = {j for i in named for j in (i, *mirrors(inputs, i))}
        units.append(sorted(moved, key=lambda i: (i != named[0], i)))
    return units


def with_axis_holders(units: list[list[int]], inputs: list[TensorInfo]) -> list[list[int]]:
    """The named units, and every other argument holding a mesh axis they hold, each a unit of its own:
    the axis can move between them (a value array and the grid it is read at, both on the axis), as
    suggest's single moves move it; every other argument stays as written."""
    named = {i for unit in units for i in unit}
    axes = {a for i in named for dim in (inputs[i].sharding or []) for a in dim}
    return units + [[t.index] for t in inputs if t.index not in named
                    and axes & {a for dim in (t.sharding or []) for a in dim}]


def written_sharding(sharding: list[list[str]] | None, rank: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(axes) for axes in normalized(sharding or [], rank) or ())


def _cut(problem: ShardingProblem, free: list[int], inputs: list[TensorInfo], outputs: list[TensorInfo],
         returned: set[int]) -> ShardingProblem | None:
    # ``outputs``: the lowered program's, whose sharding is None where the program states none; ``returned``:
    # the results that are a free argument coming back (state), which come back in its new layout, as suggest
    # pins them.
    """The problem with every argument but ``free``, and every result the program states, held to its
    written sharding; None when a written sharding is not one the solver offers (a sub-axis, an axis
    order it does not enumerate): the solver cannot then hold the rest as written."""
    held = {problem.arguments[i] for i in free}
    keep: dict[int, tuple[int, ...]] = {}
    for infos, groups in ((inputs, problem.arguments), (outputs, problem.results)):
        for t in infos:
            gid = groups[t.index]
            if gid in held or (infos is outputs and (t.sharding is None or t.index in returned)):
                continue
            sharding = written_sharding(t.sharding, len(t.shape))
            candidates = problem.groups[gid].candidates
            if sharding not in candidates:
                return None
            index = (candidates.index(sharding),)
            if keep.get(gid, index) != index:
                return None  # two values of one group written two ways: no single layout holds both
            keep[gid] = index
    return restrict_groups(problem, keep)


def _choice(target, free: list[int], report: TargetReport, spec) -> dict[int, Sharding] | None:
    """The solver's sharding for each free argument, the rest as written (None: no plan)."""
    state = set(returned_state(target, free))
    problem = _cut(target.problem, free, list(report.inputs), list(target.sig.outputs), state)
    if problem is None:
        return None
    try:
        refined = refine(target, problem, "auto", TIME_LIMIT, spec)
    except NoFeasibleSharding:
        return None
    # The plan propagation prices lowest (it realizes its layout), as suggest keeps the plan that compiles fastest.
    plan = min(refined.plans, key=lambda p: (p.check.seconds if p.check else p.solution.seconds, p.solve))
    chosen = plan_pins(plan.problem, plan.solution.assignment, plan.problem.arguments)
    return {i: chosen[i] for i in free}


def whole_layout_choice(target, report: TargetReport, spec) -> dict[int, Sharding]:
    """The arguments the solver changes with every argument free (suggest's solver version, the results the
    program states held as written), each its new sharding; empty where it finds no plan or keeps them all."""
    inputs = list(report.inputs)
    choice = _choice(target, [t.index for t in inputs], report, spec)
    return _changed(choice, inputs) if choice is not None else {}


def returned_state(target, arguments) -> dict[int, int]:
    """Result index -> the argument it returns, for the state among ``arguments``."""
    return {rt.output.index: rt.input.index for rt in target.state if rt.input.index in arguments}


def _changed(pins: dict[int, Sharding], inputs: list[TensorInfo]) -> dict[int, Sharding]:
    return {i: s for i, s in pins.items()
            if written_sharding(s, len(inputs[i].shape)) != written_sharding(inputs[i].sharding, len(inputs[i].shape))}


def single_move_candidates(target, units: list[list[int]], report: TargetReport,
                           ) -> list[tuple[str, dict[int, Sharding]]]:
    """The single moves of a mesh axis among the units' arguments (``advice.moves``, each unit moved as one:
    its first argument's move given to the others), the rest as written; each (name, the arguments it
    changes), no two alike. At most ``MAX_MOVES``. They do not depend on the solve."""
    inputs = list(report.inputs)
    written = {t.index: [list(a) for a in written_sharding(t.sharding, len(t.shape))] for t in inputs}
    leaders = {unit[0] for unit in units}
    held = {t.path for t in inputs if t.index not in leaders}
    out: list[tuple[str, dict[int, Sharding]]] = []
    moves = single_moves(inputs, written, target.problem.free_axes, target.problem.axis_sizes, held)
    for k, move in enumerate(moves[:MAX_MOVES]):
        pins = dict(move.pins)
        for unit in units:
            pins.update({i: pins[unit[0]] for i in unit[1:] if len(inputs[i].shape) == len(inputs[unit[0]].shape)})
        edits = _changed(pins, inputs)
        if edits and all(edits != e for _, e in out):
            out.append((f"move {k}", edits))
    return out


def baseline_candidates(target, report: TargetReport) -> list[tuple[str, dict[int, Sharding]]]:
    """suggest's baseline versions (``advice.baselines``: replicated, data-parallel, FSDP), each (its name, the
    arguments it changes: every argument, not the finding's alone), no two alike. suggest recommends a
    baseline's layout for a value where that version wins, so lint checks the same version for the same value:
    a jraph GraphNet's kernels written P('model', None) are spread over both axes by suggest's FSDP version,
    which moves the graph batch too (the kernels moved alone compile worse than written)."""
    inputs = list(report.inputs)
    state = {rt.input.index for rt in target.state}
    out: list[tuple[str, dict[int, Sharding]]] = []
    for name, _, pins in baseline_layouts(inputs, state, target.problem.free_axes, target.problem.axis_sizes):
        edits = _changed(pins, inputs)
        if edits and all(edits != e for _, e in out):
            out.append((name, edits))
    return out


def returned_layout(target, units: list[list[int]], report: TargetReport) -> dict[int, Sharding]:
    """The layout the compiled step returns each unit's state in, given to the unit's arguments (the
    parameter and its optimizer state, as one move): the change SL201 derives for a value that comes back
    on another layout, asked here of one value alone. Empty where no unit comes back on another layout."""
    inputs, outputs = list(report.inputs), {t.index: t for t in report.outputs}
    back = {rt.input.index: outputs[rt.output.index] for rt in target.state if rt.output.index in outputs}
    edits: dict[int, Sharding] = {}
    for unit in units:
        out = back.get(unit[0])
        if out is None:
            continue
        layout = [list(a) for a in written_sharding(out.sharding, len(out.shape))]
        edits.update({i: layout for i in unit if tuple(inputs[i].shape) == tuple(out.shape)})
    return _changed(edits, inputs)


def candidate_layouts(target, units: list[list[int]], report: TargetReport, spec,
                moves: list[tuple[str, dict[int, Sharding]]], named: list[list[int]],
                ) -> list[tuple[str, dict[int, Sharding]]]:
    """suggest's candidates for the units' arguments, the rest as written: the solver's choice, the
    ``moves`` (single moves, then suggest's baselines) that differ from it, and the finding's own arguments
    (``named``) given the layout the step returns them in; each (name, the arguments it changes), no two alike."""
    inputs = list(report.inputs)
    free = sorted(i for unit in units for i in unit)
    choice = _choice(target, free, report, spec)
    solver = _changed(choice, inputs) if choice is not None else {}
    out = ([("solver", solver)] if solver else [])
    for name, e in moves:
        if e != solver and all(e != o for _, o in out):
            out.append((name, e))
    returned = returned_layout(target, named, report)
    if returned and all(returned != e for _, e in out):
        out.append((RETURNED, returned))
    return out
