"""SL102 collective-in-loop: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

from ..common.axes import axes_in_words
from ..common.byte_sizes import format_bytes
from ..common.sharding_text import pspec_text
from ..hlo.collective_intent import INTENDED
from ..models.report import Collective, ConstraintCause, Severity, TensorInfo
from ..models.rule_codes import SL102
from .constraint_cause import constraint_fix, constraint_of
from .context import RuleContext
from .parameter_advice import sharding_advice
from .registry import Emitter, OptionKind, Provenance, RuleOption, RuleTraits, define_rule
from .sl101_replicating_collective import replicating
from .unknown_loops import bound_bytes, range_text

LOOP_COLLECTIVE_BYTES = RuleOption(
    "loop-collective-bytes", 512 * 1024**2, OptionKind.bytes,
    "bytes per step (bytes times executions, summed per source line) at which collectives "
    "in a loop are reported")


def collective_in_loop(ctx: RuleContext, out: Emitter) -> None:
    """A collective inside a loop body, weighted by the loop's trip count.

    What it does
    ------------
    Reports the resharding collectives of one source line that run more than
    once per step (inside a `scan`, `fori_loop` or `while_loop` body) when their
    bytes times their execution counts, summed, reach `loop-collective-bytes`.
    Traffic the sharding asked for (a layer's FSDP parameter gather, a gradient
    reduction, tensor-parallel partial sums: the collective's `intent`) is
    counted but not reported, and a collective SL101 reports (it builds a
    large array on every device) is SL101's finding, not a second one. The
    finding lists its collectives (`ops`) and names the argument behind most
    of their bytes where one is found, or else the `with_sharding_constraint`
    whose sharding they undo (its line and spec, `constraint`). A loop whose
    trip count XLA does not know (a data-dependent `while_loop`, a diffrax
    solve) counts its collectives once; where its condition proves a bound
    (`(change > tol) & (k < max_steps)`) the group is judged at that bound
    too and said as "at least X, up to Y at the bound of N runs";
    `--loop-trips N` counts such loops N times instead.

    Why is this bad
    ---------------
    A collective in a loop body runs on every iteration. Re-laying out the
    carry, or gathering a value that does not change across iterations, moves
    the same bytes each time; a layer scan over 48 layers multiplies a small
    collective 48-fold.

    Example
    -------
    ```python
    def body(h, _):
        h = jax.lax.with_sharding_constraint(h, P("data", "model"))
        return jnp.cumsum(h, axis=1), None  # reads along the model-sharded axis
    h, _ = jax.lax.scan(body, x, None, length=48)
    ```

    Fix
    ---
    Where a matmul at the line reads a parameter's loop slice (a scanned
    layer's weight) that holds the mesh axis XLA gathers the matmul's other
    operand over (an FSDP weight sharded on its output dimension by the axis
    the batch is split on), the fix is FSDP's per-layer weight all-gather:
    the line to paste, `w = jax.lax.with_sharding_constraint(w, spec)` with
    the slice's spec less that axis, compiled as pasted (the weight's reads
    and its cotangent constrained) and printed only when measured better, or
    else what it was measured to cost. Where the body's own
    `with_sharding_constraint` is the cause, the fix is that constraint with
    the gathered axes off the dimension the body reads along, compiled and
    printed only when measured better. Otherwise the advice (keep the loop's
    values in the layout the body reads them in, or hoist a gather of a
    loop-invariant value out of the loop) says it was not compiled, and why.
    """
    for group in loop_groups(ctx):
        total = sum(c.bytes * c.count for c in group)
        counts = sorted({c.count for c in group})
        kinds = ", ".join(
            f"{n}x {k}" if n > 1 else k
            for k, n in sorted({c.kind: sum(1 for g in group if g.kind == c.kind) for c in group}.items())
        )
        axes = axes_in_words(sorted({a for c in group for a in c.mesh_axes}),
                             dict(ctx.signature.mesh.axes)) or "all devices"
        runs = f"{counts[0]}x" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}x"
        # Counted once in a loop whose trip count XLA does not know: reported by its loop's bound, as a range.
        figure = (range_text(group) if any(c.count_is_lower_bound for c in group)
                  else f"{format_bytes(total)} per step per device")
        if any(c.count_is_lower_bound for c in group):
            runs = "at least once" if counts == [1] else f"at least {runs}"
        elif any(c.count_assumed for c in group):
            runs += " (as --loop-trips counts them)"
        parameter = _cause(ctx, group)
        constraint = None if parameter else _constraint(ctx, group)
        cause = f": they come from {parameter.path} {pspec_text(parameter.sharding)}" if parameter else ""
        if constraint is not None:
            # The constraint is in the collective's own file (constraint_of): its line says where.
            where = f" at line {constraint.source.line}" if constraint.source else ""
            cause = (f": they gather back what the with_sharding_constraint{where} "
                     f"{pspec_text(constraint.sharding)} shards, which the body then reads whole")
        changed = _constraint_fix(ctx, group) if constraint is not None else None
        out.emit(
            f"{kinds} over {axes} run {runs} per step in a loop: {figure}{cause}",
            group[0].source, via=group[0].via, parameter=parameter, total_bytes=total,
            ops=[c.hlo_name for c in group] if len(group) > 1 else None,
            fix=(f"keep the loop's values in the layout the body reads them in: {changed}" if changed else
                 "keep the loop's values in the layout the body reads them in (a carry sharded on an axis the "
                 "body does not read along), or gather a loop-invariant value once before the loop"),
            subject=group[0].hlo_name, why=sorted({c.why for c in group if c.why}) or None,
            constraint=constraint,
        )


def _cause(ctx: RuleContext, group: list[Collective]) -> TensorInfo | None:
    """The argument behind most of the group's bytes (parameter_advice.py), if any is named."""
    moved: dict[str, tuple[int, TensorInfo]] = {}
    for c in group:
        parameter = sharding_advice(ctx, c)[0]
        if parameter is not None:
            before = moved.get(parameter.path, (0, parameter))[0]
            moved[parameter.path] = (before + c.bytes * c.count, parameter)
    return max(moved.values(), key=lambda m: (m[0], m[1].path))[1] if moved else None


def _constraint(ctx: RuleContext, group: list[Collective]) -> ConstraintCause | None:
    """The constraint behind the group's largest collective whose cause is one (constraint_cause.py)."""
    for c in sorted(group, key=lambda c: (-c.bytes * c.count, c.hlo_name)):
        found = constraint_of(ctx, c)
        if found is not None:
            return found
    return None


def _constraint_fix(ctx: RuleContext, group: list[Collective]) -> str | None:
    """The constraint's change for the group's largest collective whose cause it is (constraint_cause.py)."""
    for c in sorted(group, key=lambda c: (-c.bytes * c.count, c.hlo_name)):
        if constraint_of(ctx, c) is not None:
            return constraint_fix(ctx, c)
    return None


def loop_groups(ctx: RuleContext) -> list[list[Collective]]:
    """The resharding collectives in loops this rule reports, one group per source line (a layer
    scan's many per-layer collectives are one decision) whose bytes reach the limit. A collective
    SL101 reports (it replicates a value) is SL101's finding, with its argument and fix, not a second one."""
    limit = ctx.option(LOOP_COLLECTIVE_BYTES)
    by_line: dict[tuple[str | int, ...], list[Collective]] = {}
    own = {c.hlo_name for c in replicating(ctx)}
    for c in ctx.collectives:
        # A count XLA does not know (counted once, or as --loop-trips says) is a loop's too.
        if (c.count > 1 or c.count_is_lower_bound or c.count_assumed) and c.intent not in INTENDED \
                and c.hlo_name not in own:
            key = (c.source.file, c.source.line) if c.source else (c.hlo_name,)
            by_line.setdefault(key, []).append(c)
    # Judged by the bytes at the bound the loops' conditions prove where a count is XLA's lower bound.
    return [g for g in by_line.values() if sum(c.bytes * c.count for c in g) >= limit or _bound_reaches(g, limit)]


def _bound_reaches(group: list[Collective], limit: int) -> bool:
    """Whether the group's bytes at the bound its loops' conditions prove reach ``limit`` (every loop bounded)."""
    bounds = [bound_bytes(c) for c in group]
    return all(u is not None for u in bounds) and sum(u or 0 for u in bounds) >= limit


RULE = define_rule(SL102, Severity.warning, collective_in_loop,
                   options=(LOOP_COLLECTIVE_BYTES,),
                   traits=RuleTraits(provenance=Provenance.predicted_collective, argument_layout=True,
                                     about_traffic=True,
                                     loop_weight_gather=True,
                                     claims=lambda ctx: [c.hlo_name for g in loop_groups(ctx) for c in g]))
