"""The terminal view of ``propagate``: sharded values, predicted communication,
agreement with Shardy, and provenance on request."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..passes.byte_sizes import format_bytes
from ..passes.models import PropagateRun, PropagationReport
from ..passes.sharding_text import pspec_text
from .terminal import shape_text

MAX_ROWS = 20


def _values(t: PropagationReport) -> Table:
    sharded = [v for v in t.values if any(v.sharding)]
    table = Table(title=f"Sharded values ({len(sharded)} of {len(t.values)}, largest first)", title_justify="left")
    for col, kw in (("value", {"no_wrap": True}), ("shape", {"no_wrap": True}), ("sharding", {}),
                    ("per device", {"justify": "right", "no_wrap": True}), ("source", {"no_wrap": True}),
                    ("from", {"overflow": "ellipsis", "max_width": 36})):
        table.add_column(col, **kw)
    for v in sharded[:MAX_ROWS]:
        table.add_row(v.name, shape_text(v.dtype, v.shape), pspec_text(v.sharding), format_bytes(v.per_device_bytes),
                      str(v.source) if v.source else "-", v.seed or "-")
    return table


def _predicted(t: PropagationReport) -> Table | None:
    if not t.predicted:
        return None
    table = Table(title="Predicted communication", title_justify="left")
    for col, kw in (("kind", {"no_wrap": True}), ("bytes", {"justify": "right", "no_wrap": True}), ("axes", {}),
                    ("op", {"no_wrap": True}), ("source", {"no_wrap": True}), ("compiled", {}),
                    ("why", {"overflow": "fold"})):
        table.add_column(col, **kw)
    for p in t.predicted[:MAX_ROWS]:
        matched = {True: "yes", False: "no", None: "-"}[p.matched_compiled]
        table.add_row(p.kind, format_bytes(p.bytes), ",".join(p.mesh_axes), p.op.replace("stablehlo.", ""),
                      str(p.source) if p.source else "-", matched, p.reason)
    return table


def render_propagation(run: PropagateRun, console: Console, explained: dict[str, list[str]] | None = None) -> None:
    for t in run.targets:
        console.print(Rule(f"[bold]{t.name}[/bold]", align="left"))
        console.print(f"mesh {' x '.join(f'{k}={v}' for k, v in t.mesh.items()) or '(none)'}")
        console.print(_values(t))
        table = _predicted(t)
        if table is not None:
            console.print(table)
        a = t.agreement_with_shardy
        if a is not None:
            line = Text(f"agreement with Shardy: {a.agreeing}/{a.compared} values ({100 * a.fraction:.1f}%)")
            console.print(line)
            for d in a.disagreements[:5]:
                console.print(f"  {d.value} ({d.source or '-'}): ours {pspec_text(d.ours)}, Shardy {pspec_text(d.shardy)}")
        if t.ops_without_rule:
            console.print(f"propagation stops at ops without a sharding rule: {', '.join(t.ops_without_rule)}")
        for query, lines in (explained or {}).items():
            if not lines:
                continue
            console.print(Text(f"why {query}:", style="bold"))
            for line in lines:
                console.print(f"  {line}")
