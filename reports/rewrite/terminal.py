"""The terminal view of ``rewrite``: before and after side by side."""

from __future__ import annotations

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ...passes.common.byte_sizes import format_bytes, format_signed_bytes
from ...passes.common.durations import format_seconds
from ...passes.common.sharding_text import pspec_text
from ...passes.models.rewrite import RewriteReport, RewriteRun
from ..common.tensor_text import earlier_sharding_text, path_tail_text, shape_text
from ..common.terminal_safe import code_text, shown, terminal_safe
from .validation_text import outputs_match_text

_NAN_LINES = 4  # outputs NaN or Inf in both versions listed one per line; more are counted


def _side_by_side(r: RewriteReport) -> Table:
    table = Table(title="Before and after", title_justify="left")
    for col, kw in (("", {}), ("before", {"justify": "right"}), ("after", {"justify": "right"}),
                    ("change", {"justify": "right"})):
        table.add_column(col, **kw)
    for label, attr in (("peak / device", "peak_bytes"), ("  temp", "temp_bytes"), ("  arguments", "argument_bytes"),
                        ("  outputs", "output_bytes"), ("  aliased", "alias_bytes"),
                        ("collectives / step", "collective_bytes")):
        b, a = getattr(r.before, attr), getattr(r.after, attr)
        table.add_row(label, format_bytes(b), format_bytes(a), format_signed_bytes(a - b) if a != b else "")
    table.add_row("collective ops", str(len(r.before.collectives)), str(len(r.after.collectives)), "")
    if r.before.time is not None and r.after.time is not None:
        b, a = r.before.time.seconds, r.after.time.seconds
        change = f"{(a / b - 1) * 100:+.1f}%" if b and a != b else ""
        table.add_row(f"est. step time ({r.after.time.device})", format_seconds(b), format_seconds(a), change)
    return table


def _changes(r: RewriteReport) -> Table | None:
    if not r.collective_changes:
        return None
    table = Table(title="Collectives that changed (bytes x count per step)", title_justify="left")
    for col in ("", "kind", "axes", "shape", "before", "after", "source"):
        table.add_column(col)
    for c in r.collective_changes[:15]:
        table.add_row(c.change, c.kind, ",".join(c.mesh_axes), shape_text(c.dtype, c.shape),
                      format_bytes(c.bytes_before), format_bytes(c.bytes_after), str(c.source or "-"))
    return table


# Columns' borders and padding in a four-column table; the width the why column keeps at least.
_BORDERS, _WHY_WIDTH = 13, 24


def _output_width(console_width: int, paths: list[str], before: list[str], after: list[str]) -> int:
    """The output column's width: the longest path where it fits, else what the other columns leave (the
    paths cut in their middle, path_tail_text, not at their end, where paths of one pytree differ)."""
    others = max(map(len, ["compiled before", *before])) + max(map(len, ["pinned to", *after]))
    room = console_width - _BORDERS - others - _WHY_WIDTH
    return max(min(max(map(len, paths)), room), 20)


def render_rewrite(run: RewriteRun, console: Console) -> None:
    raw = run  # the Python change is printed as Text, not markup: escaping would put "\\[" into it
    run = terminal_safe(run)
    for r, code in zip(run.targets, raw.targets):
        console.print(Rule(f"[bold]{r.name}[/bold]", align="left"))
        console.print(f"platform {r.platform}")
        if r.out_shardings:
            table = Table(title="Output shardings pinned", title_justify="left")
            before = [earlier_sharding_text(a.before) for a in r.out_shardings]
            after = [pspec_text(a.after) for a in r.out_shardings]
            # The paths cut as written (code.out_shardings: the model before escaping), shown as Text: a cut
            # through an escaped "\\[" would turn the rest into markup.
            width = _output_width(console.width, [a.path for a in code.out_shardings], before, after)
            table.add_column("output", min_width=width, no_wrap=True)
            for col in ("compiled before", "pinned to", "why"):
                table.add_column(col)
            for a, written, b, p in zip(r.out_shardings, code.out_shardings, before, after):
                table.add_row(Text(code_text(path_tail_text(written.path, width))), b, p, a.why)
            console.print(table)
        console.print(_side_by_side(r))
        changes = _changes(r)
        if changes is not None:
            console.print(changes)
        console.print(shown(r.verdict, style="bold"))
        for line in r.remaining:
            console.print(f"  remaining: {line}")
        if code.python_fix:
            console.print(Text.assemble(("Python change: ", "bold green"),
                                        code_text(f"jax.jit(..., {code.python_fix})")))
        elif r.python_fix_missing:
            console.print(shown(f"no Python change: {r.python_fix_missing}"))
        v = r.validation
        if v is not None:
            if not v.ran:
                console.print(f"validation skipped: {v.reason}")
            else:
                sh = "yes" if v.shardings_match else "NO"
                console.print(
                    f"validation on {v.backend} ({'the script' if v.inputs == 'shard_lint_inputs' else 'seeded'} "
                    f"inputs): outputs match {outputs_match_text(v)}, shardings as declared {sh}, median step "
                    f"{v.time_before_s * 1000:.2f} ms -> {v.time_after_s * 1000:.2f} ms over {v.repeats} runs"
                    + (f", peak in use {format_bytes(v.measured_peak_before_bytes)} -> "
                       f"{format_bytes(v.measured_peak_after_bytes)}" if v.measured_peak_before_bytes else "")
                )
                for m in v.mismatches:
                    console.print(shown(f"  mismatch: {m}"))
                # One line each would bury the verdict (an Adam step: every output); the verdict has the count.
                nan_lines = v.nan_values if len(v.nan_values) <= _NAN_LINES else v.nan_values[:_NAN_LINES - 1]
                for m in nan_lines:
                    console.print(shown(f"  not compared, in both versions: {m}"))
                if len(nan_lines) < len(v.nan_values):
                    console.print(Text(f"  and {len(v.nan_values) - len(nan_lines)} more (all of them in the JSON "
                                       f"report's nan_values)"))
