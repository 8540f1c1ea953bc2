"""SL207 idle-mesh-axis: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.data_parallel import batch_dimension, data_parallel_layout
from ..common.word_lists import listed
from ..models.report import Finding, Severity, TensorInfo
from ..models.rule_codes import SL105, SL207
from .context import RuleContext
from .idle_batch_axes import IDLE_BATCH_WHY, batch_axes_text, batch_fix_text, batch_layouts_text
from .parameter_advice import idle_axes
from .registry import Emitter, FixKind, RuleTraits, define_rule

# The finding's second provenance line, naming the idle axes (what ``without_covered`` reads).
IDLE_AXES_WHY = "no argument is split on mesh axis "


def idle_mesh_axis(ctx: RuleContext, out: Emitter) -> None:
    """A mesh axis of several devices that splits no argument: its devices compute the same step.

    What it does
    ------------
    Reports a mesh axis of more than one device on which no argument of the
    step is split, where the step's batch arguments (those it does not return
    as state) are split on dimension 0 over the other axes, or where the step
    batches over a dimension of them (a vmapped batch of problems: the
    dimension its matmuls batch over) and leaves it whole, nothing split at
    all included. The devices along that axis then hold the same values and
    run the same computation. A step with no batch (one problem) is not
    reported: nothing of it divides over the axis. A step whose arguments
    are all state it returns, two arrays or more split on dimension 0 over
    the other axes (a simulation's positions and momenta), is reported with
    that state as its batch: its rows divide over the idle axis as a
    batch's do (one array returned, x -> 2 * x, is not). Where XLA spends the axis
    on resharding collectives instead, SL105's idle-batch finding says so,
    and where another finding's fix puts the axis to use (SL101's weight
    moved onto it, SL203's replicated argument spread over it), that finding
    does: this rule is silent (one cause, one finding).

    Why is this bad
    ---------------
    An idle axis multiplies the work per device by its size and divides
    nothing: a step on a chains=4 x data=2 mesh whose chains are replicated
    does every chain's work on every device, at four times the compute and
    peak of the layout that splits them (a blackjax sampler's step, 7.4 s
    against 1.9 s estimated, 2.1 GiB against 642 MiB). Nothing in the
    compiled program shows it: there is no collective over the axis.

    Example
    -------
    ```python
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    X = jax.ShapeDtypeStruct((rows, features), f32, sharding=NamedSharding(mesh, P("data")))
    # nothing is sharded on "model": its two devices repeat each other's work
    ```

    Fix
    ---
    Split the batch arguments on dimension 0 over every mesh axis, as
    suggest's data-parallel baseline does (`P(("data", "model"))`; a vmapped
    batch on its batch dimension, `P(None, ("data", "model"))` for
    `vmap(..., in_axes=1)`), or give the idle axis to what the step computes
    many of (its chains, its experts, a weight's output features). The batch
    on every axis is compiled and printed only when measured better.
    """
    idle = idle_axes(ctx)
    if not idle:
        return
    # Where XLA spends the idle axis on resharding, SL105's idle-batch finding stands for it: SL105 claims those
    # collectives (its traits' claims are exactly the idle-batch finding's).
    if ctx.claims_by_rule.get(SL105.code):
        return
    state = {rt.input.index for rt in ctx.roundtrips}
    mesh = ctx.signature.mesh.axes
    sizes = dict(mesh)
    free = [a for a, n in mesh if n > 1]
    candidates = [t for t in ctx.inputs if t.index not in state and t.shape]
    # Every argument state (a particle simulation's positions and momenta, returned): the state split on
    # dimension 0 is what divides over the idle axis (jax-md's NVT step on P('p') of a 4x2 mesh, newbie19b F3).
    all_state = not candidates
    if all_state:
        candidates = [t for t in ctx.inputs if t.shape]
    split = [t for t in candidates if any(t.sharding or [])]
    # The batch: each argument's dimension to split over every axis (data_parallel.batch_dimension): the one the
    # step's matmuls batch over (a vmapped batch of problems, where nothing is split and every device computes
    # every problem, or where each problem's points are split), else dimension 0 where it is written split. An
    # argument split on a dimension that is no batch (a weight's tensor parallelism) leaves the step as written,
    # and a step with no batch dimension (a single problem) is not batchable: silent.
    dims = {t.index: batch_dimension(t.shape, t.sharding, ctx.argument_batch_dims.get(t.index, ()), free, sizes)
            for t in candidates}
    written_on_0 = bool(split) and all(not any((t.sharding or [])[1:]) and dims[t.index] == 0 for t in split)
    if all_state and (not written_on_0 or len(split) < 2):
        # State split on another dimension, or nothing split: one problem, nothing of it a batch. One array
        # returned (x -> 2 * x) is a function of it, not a simulation's state (positions and momenta together).
        return
    batch = split if written_on_0 else [t for t in candidates if dims[t.index] is not None]
    if not batch or any(dims[t.index] is None for t in (*batch, *split)):
        return
    layouts = [data_parallel_layout(t.shape, free, sizes, dims[t.index] or 0) or [] for t in batch]
    devices = 1
    for a in idle:
        devices *= sizes[a]
    message = (_message(batch, idle, devices, "state" if all_state else "batch") if written_on_0
               else _vmapped_message(batch, [dims[t.index] or 0 for t in batch], idle, devices, bool(split)))
    out.emit(message, ctx.input_source(batch[0].index),
             fix=batch_fix_text(batch, layouts), why=[IDLE_BATCH_WHY, IDLE_AXES_WHY + ", ".join(idle)],
             parameter=batch[0])
    out.findings[-1] = out.findings[-1].model_copy(update={"parameters": [t.path for t in batch]})


def _uses(f: Finding, axes: set[str]) -> bool:
    """Whether a finding's fix puts one of ``axes`` on an argument (its suggestion, or a candidate it compiles)."""
    specs = [f.suggested_sharding, *(c.sharding for c in f.candidates)]
    return any(a.split(":")[0] in axes for spec in specs if spec for dim in spec for a in dim)


def without_covered(findings: list[Finding]) -> list[Finding]:
    """The findings without an SL207 whose idle axes another finding's fix already gives work (SL101's weight on
    the idle axis, SL203's replicated table spread over it): one cause, one finding."""
    out = []
    for f in findings:
        said = next((line for line in f.provenance if line.startswith(IDLE_AXES_WHY)), None)
        if f.rule == SL207.code and said is not None:
            axes = set(said.removeprefix(IDLE_AXES_WHY).split(", "))
            if any(_uses(o, axes) for o in findings if o.rule != SL207.code):
                continue
        out.append(f)
    return out


def _message(batch: list[TensorInfo], idle: list[str], devices: int, role: str) -> str:
    axes = ", ".join(f"'{a}'" for a in idle)
    which = "axis" if len(idle) == 1 else "axes"
    return (f"no argument is split over mesh {which} {axes}: the {role} arguments {batch_layouts_text(batch)} are "
            f"split on dimension 0 over {batch_axes_text(batch)} only, so the {devices} devices along {axes} hold the "
            f"same values and repeat each other's work ({devices} copies of every op of the step)")


def _vmapped_message(batch: list[TensorInfo], dims: list[int], idle: list[str], devices: int, split: bool) -> str:
    axes = ", ".join(f"'{a}'" for a in idle)
    which = "axis" if len(idle) == 1 else "axes"
    where = (f"dimension {dims[0]}" if len(set(dims)) == 1
             else listed([f"{t.path}'s dimension {d}" for t, d in zip(batch, dims, strict=True)]))
    cause = (f"no argument is split over mesh {which} {axes}" if split
             else f"no argument is split over the mesh (mesh {which} {axes})")
    return (f"{cause}: the batch arguments {batch_layouts_text(batch)} leave their batch ({where}, the one the "
            f"step's matmuls batch over) whole, so the {devices} devices along {axes} hold the same values and "
            f"compute every problem of the batch ({devices} copies of every op of the step)")


RULE = define_rule(SL207, Severity.warning, idle_mesh_axis,
                   traits=RuleTraits(fix=FixKind.parameter, merge_findings=without_covered))
