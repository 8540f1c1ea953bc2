"""What every format of ``suggest`` writes the same way: the solver's line, the
plans' rows, each version's cells, the arguments whose sharding changes."""

from __future__ import annotations

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.suggest import SuggestReport, Version
from ..common.python_lines import folded

MAX_ROWS = 40  # arguments listed in the terminal and Markdown (the JSON has all)
# Estimated times this close are one time (the share suggest's choice uses, analyzer/backend/advice/verdict.py).
SAME_TIME = 0.01


def _gap(r: SuggestReport) -> str:
    """The solver's objective against its bound: both are of the cost model, so the gap certifies the plan
    against the model's optimum only, never against what XLA compiles (newbie15's GraphNet: "certified gap 0%"
    beside a plan that compiled to a higher peak and more collectives than the written layout)."""
    s = r.solver
    if s.lp_bound_seconds is not None and s.certified_gap is not None:
        return f"{s.method}: plan {format_seconds(s.objective_seconds)} in the cost model, LP bound " \
               f"{format_seconds(s.lp_bound_seconds)}, certified gap {s.certified_gap * 100:.2g}% " \
               f"{MODEL_ONLY}{compiled_worse(r)}"
    if s.gap is None:
        return f"{s.method}: no bound{compiled_worse(r)}"
    return f"{s.method}: gap {s.gap * 100:.2g}% {MODEL_ONLY} (objective {format_seconds(s.objective_seconds)}, " \
           f"bound {format_seconds(s.lower_bound_seconds)}){compiled_worse(r)}"


MODEL_ONLY = "(to the cost model's optimum, not to what XLA compiles)"


def _worse(solver: Version, other: Version) -> bool:
    """Whether the solver's plan compiled worse than ``other``: a step estimated longer by more than the
    SAME_TIME share, or one the same time with a higher peak and more collective bytes both (a plan estimated
    faster is not called worse for its bytes: suggest's choice ranks by time first too)."""
    if solver.estimated_seconds is None or other.estimated_seconds is None:
        return False
    if solver.estimated_seconds > other.estimated_seconds * (1 + SAME_TIME):
        return True
    return solver.estimated_seconds >= other.estimated_seconds * (1 - SAME_TIME) \
        and (solver.peak_bytes or 0) > (other.peak_bytes or 0) \
        and (solver.collective_bytes or 0) > (other.collective_bytes or 0)


def compiled_worse(r: SuggestReport) -> str:
    """Said beside the gap where the solver's plan compiled worse than the written layout or a baseline
    (XLA's figures, the versions' table), so a gap of 0% is not read as the best layout: empty otherwise."""
    # getattr: a report built without its versions (model_construct) has no table to compare with.
    by = {v.name: v for v in getattr(r, "versions", None) or () if not v.error and v.fits is not False}
    solver = by.get("solver")
    if solver is None:
        return ""
    beaten = [v for v in by.values() if v is not solver and _worse(solver, v)]
    if not beaten:
        return ""
    written = next((v for v in beaten if v.name == "written"), None)
    others = [v.name for v in beaten if v is not written]
    head = written or min(beaten, key=lambda v: (v.estimated_seconds or 0, v.name))
    what = "the written layout" if head is written else f"the {head.name} version"
    text = (f"; compiled, this plan is worse than {what} (est. step {format_seconds(solver.estimated_seconds or 0)}"
            f" vs {format_seconds(head.estimated_seconds or 0)}, peak {format_bytes(solver.peak_bytes or 0)} vs "
            f"{format_bytes(head.peak_bytes or 0)}, collectives {format_bytes(solver.collective_bytes or 0)} vs "
            f"{format_bytes(head.collective_bytes or 0)})")
    rest = [n for n in others if n != head.name]
    if rest:
        text += f" and than the {', '.join(rest[:-1]) + ' and ' + rest[-1] if len(rest) > 1 else rest[0]} " \
                f"version{'s' if len(rest) > 1 else ''}"
    return text


def _tied_by(r: SuggestReport) -> str:
    """How the layers were tied, and so which problem the LP bound bounds."""
    by = r.solver.tied_by
    if not by:
        return ""
    how = " and ".join({"symmetry": "by symmetry", "repeats": "as repeats"}.get(b, b) for b in by)
    return f" {how}: the LP bound is the {'tied' if 'repeats' in by else 'untied'} problem's"


def solver_line(r: SuggestReport, plans_inline: bool = True) -> str:
    """The solver's figures; the plans in the line unless a table lists them."""
    s = r.solver
    tied = "" if s.untied_variables is None else \
        f" ({s.untied_variables:,} before repeated layers were tied{_tied_by(r)})"
    return (f"{_gap(r)}; {s.variables:,} variables{tied} over {s.value_groups:,} value groups and {s.ops:,} ops"
            + (f" ({s.rounds} rounds)" if s.rounds > 1 else "")
            + (_propagation_text(r) if plans_inline or len(s.plans) <= 1 else ""))


def _propagation_text(r: SuggestReport) -> str:
    """The plans the solver compiled: per solve, its cost model, its arguments'
    layout as propagated, and the compiled estimate (the kept one marked *)."""
    s = r.solver
    if not s.plans:
        return ""

    def one(p) -> str:
        compiled = p.error and "did not compile" or format_seconds(p.estimated_seconds)
        propagated = "-" if p.propagated_seconds is None else format_seconds(p.propagated_seconds)
        return (f"{'*' if p.solve == s.kept else ''}{p.solve}: {format_seconds(p.objective_seconds)} / "
                f"{propagated} / {compiled}")

    if len(s.plans) == 1:
        p = s.plans[0]
        return f"; its plan as propagated {one(p).split(' / ', 1)[1].replace(' / ', ', compiled ')}"
    excluded = max((len(p.excluded) for p in s.plans), default=0)
    return (f"; {len(s.plans)} plan{'' if len(s.plans) == 1 else 's'} (solve: model / propagated / compiled) "
            + ", ".join(one(p) for p in s.plans)
            + (f", {excluded} argument sharding{'' if excluded == 1 else 's'} excluded where propagation carried "
               f"{'it' if excluded == 1 else 'them'} past the plan" if excluded else ""))


PLAN_HEAD = ("solve", "cost model", "propagated", "values differing", "compiled", "peak / device",
              "argument shardings excluded before it")


def plan_rows(r: SuggestReport) -> list[list[str]]:
    """One row per solve of the propagation check (the kept one marked *); the
    exclusions each solve added to the ones before it."""
    rows, before = [], 0
    for p in r.solver.plans:
        rows.append([f"{'*' if p.solve == r.solver.kept else ''}{p.solve}", format_seconds(p.objective_seconds),
                     "-" if p.propagated_seconds is None else format_seconds(p.propagated_seconds),
                     "-" if p.differing_values is None else f"{p.differing_values:,}",
                     p.error and "did not compile" or format_seconds(p.estimated_seconds),
                     "-" if p.peak_bytes is None else format_bytes(p.peak_bytes),
                     "; ".join(p.excluded[before:]) or "-"])
        before = len(p.excluded)
    return rows


def version_cells(v: Version) -> list[str]:
    if v.error:
        return [v.name, "-", "-", "-", "-", v.error]
    fits = "" if v.fits is None else (" fits" if v.fits else " OVER")
    model = format_seconds(v.model.seconds) if v.model else "-"
    return [v.name, format_bytes(v.peak_bytes or 0) + fits, format_bytes(v.collective_bytes or 0),
            format_seconds(v.estimated_seconds), model, v.description]


VERSION_HEAD = ("version", "peak / device", "collectives / step", "est. step", "cost model", "")


def model_note(r: SuggestReport) -> str | None:
    """Said where the cost model column gives every version the same figure (value_function's five
    versions all read 1.22 s while their compiled estimates ran from 946 ms to 8.16 s): the model
    solves each version's intermediates at their best, so equal figures say it sees no difference,
    not that there is none."""
    figures = {format_seconds(v.model.seconds) for v in r.versions if v.model is not None and not v.error}
    modelled = [v for v in r.versions if v.model is not None and not v.error]
    if len(modelled) < 2 or len(figures) != 1:
        return None
    return (f"The cost model gives every version {figures.pop()}: it chooses each version's intermediate shardings "
            "at their best, so it sees no difference between these arguments; the compiled estimates (est. step) "
            "are what tell them apart.")


def changed_arguments(r: SuggestReport):
    return [a for a in r.arguments if pspec_text(a.current) != pspec_text(a.suggested)]


def logical_rule_lines(r: SuggestReport) -> list[str]:
    """The logical-rule advice, one sentence per line (the rules text is shown as code apart)."""
    a = r.logical_rules
    if a is None:
        return []

    def axes(x: list[str] | None) -> str:
        return "no rule" if x is None else "none" if not x else repr(x[0]) if len(x) == 1 else repr(tuple(x))

    changes = "; ".join(f"{c.logical!r}: {axes(c.written)} -> {axes(c.suggested)}" for c in a.changes)
    lines = [f"logical axis rules to change: {changes}" if changes else "the logical axis rules already give it"]
    lines.append(f"checked with Flax's logical_to_mesh_axes: the new rules give {a.reached} of {a.covered} "
                 "arguments their suggested sharding")
    lines += [f"  {x} (it needs a logical name of its own)" for x in a.exceptions]
    return lines


def placement_why(r: SuggestReport) -> str:
    """Why the text places the inputs rather than giving jit in_shardings."""
    if r.in_shardings_text is None:  # keyword arguments: the text places them by name
        return "keyword arguments: jit takes no in_shardings with them; place the inputs on these and jit keeps " \
               "their shardings"
    return "Explicit axes: place the inputs on these (jit refuses in_shardings they do not have)"


def jit_code(r: SuggestReport) -> str | None:
    """The Python to paste for the in_shardings/out_shardings case: the in_shardings bound to a name,
    the line that gives abstract inputs carrying a sharding the new ones (where it checked), then the
    jit with the program's own options (its donation) kept. None where the text places the inputs.
    ``mesh`` in it is the user's Mesh, which the text cannot name: a comment first says so."""
    if r.placement_text or not r.in_shardings_text:
        return None
    options = [x for x in (r.out_shardings_text, r.jit_options_text) if x]
    mesh = [_mesh_comment(r)] if "NamedSharding(mesh," in r.in_shardings_text + "".join(options) else []
    if r.abstract_inputs_text is None:
        return "\n".join([*mesh, folded(_jit(r) + ", ".join([r.in_shardings_text, *options]) + ")")])
    return folded("\n".join([*mesh, r.in_shardings_text.replace("in_shardings=", "in_shardings = ", 1),
                      "# abstract inputs (jax.ShapeDtypeStruct) must carry these: .lower(*with_shardings(<arguments>))",
                      r.abstract_inputs_text,
                      _jit(r) + ", ".join(["in_shardings=in_shardings", *options]) + ")"]))


def _jit(r: SuggestReport) -> str:
    return f"jax.jit({r.function_name or 'step'}, "


def _mesh_comment(r: SuggestReport) -> str:
    axes = ", ".join(f"{name!r}: {size}" for name, size in r.mesh)
    return f"# mesh: your jax.sharding.Mesh ({axes})"


def placement_jit(r: SuggestReport) -> str | None:
    """The jit after the placement text: out_shardings and the program's own options (its donation)."""
    options = [x for x in (r.out_shardings_text, r.jit_options_text) if x]
    return _jit(r) + ", ".join(options) + ")" if options else None
