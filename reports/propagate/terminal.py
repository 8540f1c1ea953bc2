"""The terminal view of ``propagate``: sharded values, predicted communication,
agreement with Shardy, and provenance on request."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from ...passes.common.axes import axes_text
from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import pspec_text
from ...passes.models.propagation import PropagatedValue, PropagateRun, PropagationReport
from ...passes.models.report import where_text
from ..common.agreement_text import agreement_text, prediction_counts_text
from ..common.tensor_text import shape_text, short_op_name
from ..common.terminal_layout import Column, fitted_table
from ..common.terminal_safe import shown, terminal_safe

MAX_ROWS = 20


def value_text(v: PropagatedValue) -> str:
    """A value in the user's terms: ``%arg0`` -> ``argument v_next``; ``@_interp:%72`` (a
    StableHLO value of the private function _interp) -> ``slice in _interp``. The SSA
    name, which --explain also takes, has a column of its own."""
    function, _, local = v.name.rpartition(":") if v.name.startswith("@") else ("", "", v.name)
    function = function.removeprefix("@")
    if local.startswith("%arg") and (v.seed or "").startswith("argument "):
        return f"{v.seed} (into {function})" if function else str(v.seed)
    if v.op_name:
        text = short_op_name(v.op_name)
        return f"{text} in {function}" if function and " in " not in text else text
    return f"{local} in {function}" if function else local


def _values(t: PropagationReport, width: int) -> Table:
    sharded = [v for v in t.values if any(v.sharding)]
    rows = sharded[:MAX_ROWS]
    total = len(t.values) + t.values_omitted
    title = (f"Sharded values ({len(sharded)} of the {len(t.values)} largest of {total}; --all-values lists all)"
             if t.values_omitted else f"Sharded values ({len(sharded)} of {total}, largest first)")
    columns = [
        Column("value", [value_text(v) for v in rows], fold=True),
        Column("shape", [shape_text(v.dtype, v.shape) for v in rows]),
        Column("sharding", [pspec_text(v.sharding) for v in rows], fold=True),
        Column("per device", [format_bytes(v.per_device_bytes) for v in rows], justify="right"),
        # An argument has no line: the value column names it.
        Column("source", [where_text(v.source, None) if v.source else "-" for v in rows], path=True),
        Column("from", [v.seed or "-" for v in rows], essential=False, fold=True),
        Column("SSA name", [v.name for v in rows], essential=False),
    ]
    return fitted_table(title, columns, width, _more(len(sharded)))


def _more(n: int) -> str | None:
    # A table that stops short says so: the rest are in the JSON, never silently dropped.
    return f"the first {MAX_ROWS}; {n - MAX_ROWS} more in --format json" if n > MAX_ROWS else None


def _predicted(t: PropagationReport, width: int) -> Table | None:
    if not t.predicted:
        return None
    rows = t.predicted[:MAX_ROWS]
    columns = [
        Column("kind", [p.kind for p in rows]),
        Column("bytes", [format_bytes(p.bytes) for p in rows], justify="right"),
        Column("axes", [axes_text(p.mesh_axes, t.mesh) for p in rows], fold=True),
        Column("source", [where_text(p.source, None) for p in rows], path=True),
        Column("compiled", [{True: "yes", False: "no", None: "-"}[p.matched_compiled] for p in rows]),
        Column("op", [p.op.replace("stablehlo.", "") for p in rows], essential=False),
        Column("why", [p.reason for p in rows], essential=False, fold=True),
        Column("why not compiled", [p.not_compiled_because or "" for p in rows], essential=False, fold=True),
    ]
    return fitted_table("Predicted communication", columns, width, _more(len(t.predicted)))


def render_propagation(run: PropagateRun, console: Console, explained: dict[str, list[str]] | None = None) -> None:
    run = terminal_safe(run)
    explained = terminal_safe(explained)
    for t in run.targets:
        console.print(Rule(f"[bold]{t.name}[/bold]", align="left"))
        console.print(f"mesh {' x '.join(f'{k}={v}' for k, v in t.mesh.items()) or '(none)'}")
        console.print(_values(t, console.width))
        table = _predicted(t, console.width)
        if table is not None:
            console.print(table)
        if t.prediction_counts is not None:
            console.print(shown(prediction_counts_text(t.prediction_counts)))
        if t.not_compiled:
            console.print(shown(f"not compiled: {t.not_compiled} (predictions are not matched against XLA's)"))
        a = t.agreement_with_shardy
        if a is not None:
            line = shown(agreement_text(a))
            console.print(line)
            for d in a.disagreements[:5]:
                console.print(
                    f"  {d.value} ({d.source or '-'}): ours {pspec_text(d.ours)}, Shardy {pspec_text(d.shardy)}")
            if len(a.disagreements) > 5:
                console.print(f"  ... {len(a.disagreements) - 5} more disagreements in --format json")
        if t.ops_without_rule:
            console.print(f"propagation stops at ops without a sharding rule: {', '.join(t.ops_without_rule)}")
        for query, lines in (explained or {}).items():
            if not lines:
                continue
            console.print(shown(f"why {query}:", style="bold"))
            for line in lines:
                console.print(f"  {line}")
