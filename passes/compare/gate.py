"""Baselines and the merge gate: a versioned, deterministic summary of each
target's analysis, and the comparison that flags regressions against it."""

from __future__ import annotations

from collections import defaultdict

from ..common.axes import axes_text
from ..common.byte_sizes import format_bytes
from ..models.gate import TIME_METRIC, Baseline, BaselineTarget, CollectiveSummary, GateResult, GateRow, GateThresholds
from ..models.report import Severity, TargetReport

WATCHED_NEW_KINDS = ("all-gather", "all-to-all")


def _group(kind: str, axes: list[str]) -> str:
    """A baseline's key for the collectives of one kind over the same axes (as stored: Shardy's labels)."""
    return f"{kind} over {','.join(axes) or 'all devices'}"


def _group_metric(group: str, mesh: dict[str, int]) -> str:
    """A group's row as a reader says it: a sub-axis in words (``all-to-all over data:(2)2`` -> ``all-to-all
    over pairs of data devices next to each other``), whole axes as stored."""
    kind, _, axes = group.partition(" over ")
    return group if axes == "all devices" else f"{kind} over {axes_text(axes.split(','), mesh)}"


def summarize(report: TargetReport) -> BaselineTarget:
    by_kind: dict[str, int] = defaultdict(int)
    collectives = []
    for c in report.collectives:
        per_step = c.bytes * c.count
        by_kind[_group(c.kind, c.mesh_axes)] += per_step
        collectives.append(CollectiveSummary(
            kind=c.kind, mesh_axes=c.mesh_axes, shape=c.shape, dtype=c.dtype, bytes_per_step=per_step,
            count=c.count, source=f"{c.source.file}:{c.source.line}" if c.source else None,
        ))
    collectives.sort(key=lambda c: (-c.bytes_per_step, c.kind, c.mesh_axes, c.shape, c.source or ""))
    m = report.memory
    errors = sorted(
        f"{f.rule} {f.source.file}:{f.source.line}: {f.message}" if f.source else f"{f.rule}: {f.message}"
        for f in report.findings if f.severity == Severity.error
    )
    return BaselineTarget(
        platform=report.platform, num_devices=report.num_devices, mesh=report.mesh,
        peak_bytes=m.peak_bytes if m else None, temp_bytes=m.temp_bytes if m else None,
        argument_bytes=m.argument_bytes if m else None, output_bytes=m.output_bytes if m else None,
        alias_bytes=m.alias_bytes if m else None, collective_bytes=sum(c.bytes_per_step for c in collectives),
        bytes_by_kind=dict(sorted(by_kind.items())), collectives=collectives, errors=errors,
        step_seconds=report.time.seconds if report.time else None,
        step_time_device=report.time.device if report.time else None,
    )


def _ratio(before: int | None, after: int | None) -> float | None:
    if before is None or after is None:
        return None
    if before == 0:
        return None if after == 0 else float("inf")
    return round(after / before, 4)


def _identity(c: CollectiveSummary) -> tuple[str, tuple[str, ...], tuple[int, ...], str]:
    # Source lines move with every edit above them; shape, kind and axes do not.
    return (c.kind, tuple(c.mesh_axes), tuple(c.shape), c.dtype)


_Resize = tuple[str, tuple[str, ...], str, str, tuple[int, ...], tuple[int, ...]]


def _resized(before: BaselineTarget, after: BaselineTarget, unseen: list[CollectiveSummary]
             ) -> tuple[dict[_Resize, list[tuple[CollectiveSummary, CollectiveSummary]]], list[CollectiveSummary]]:
    """The collectives of ``unseen`` (not in the baseline as they are) that are a baseline collective resized:
    the same kind, axes, dtype, rank and line, of which the baseline's shape is gone now (a capacity or a grid
    that grew: the same collective, not a new one), grouped by (kind, axes, dtype, line, old shape, new shape);
    and the rest, new. Largest pairs with largest where one line has several."""
    now = {_identity(c) for c in after.collectives}
    gone: dict[tuple[str, tuple[str, ...], str, str, int], list[CollectiveSummary]] = defaultdict(list)
    for b in before.collectives:
        if _identity(b) not in now and b.source is not None:
            gone[(b.kind, tuple(b.mesh_axes), b.dtype, b.source, len(b.shape))].append(b)
    resized: dict[_Resize, list[tuple[CollectiveSummary, CollectiveSummary]]] = defaultdict(list)
    new = []
    for c in unseen:
        candidates = gone.get((c.kind, tuple(c.mesh_axes), c.dtype, c.source or "", len(c.shape))) if c.source else None
        if not candidates:
            new.append(c)
            continue
        b = candidates.pop(0)
        resized[(c.kind, tuple(c.mesh_axes), c.dtype, c.source or "", tuple(b.shape), tuple(c.shape))].append((b, c))
    return resized, new


def _time_rows(name: str, before: BaselineTarget, after: BaselineTarget, thresholds: GateThresholds) -> list[GateRow]:
    """The estimated step time against the baseline's, when both have one on the
    same device model (a baseline written before estimates existed has none)."""
    if after.step_seconds is None or before.step_seconds is None:
        return []
    metric = f"{TIME_METRIC} ({after.step_time_device})"
    if before.step_time_device != after.step_time_device:
        return [GateRow(target=name, metric=metric, before=before.step_seconds, after=after.step_seconds,
                        ratio=None, alert=None)]
    r = None if before.step_seconds == 0 else round(after.step_seconds / before.step_seconds, 4)
    over = r is not None and r > 1 + thresholds.time_increase
    return [GateRow(
        target=name, metric=metric, before=before.step_seconds, after=after.step_seconds, ratio=r,
        alert=f"estimated step time +{(r - 1) * 100:.1f}% (limit +{thresholds.time_increase * 100:g}%)"
        if over and r is not None else None,
    )]


# The compilers that matter to a platform, beside jax and jaxlib (which every platform uses).
_PLATFORM_COMPILERS = {"tpu": ("libtpu",), "gpu": ("jax-cuda12-plugin", "jax-cuda13-plugin")}


def _platform_family(platform: str) -> str:
    """cpu, tpu or gpu from a report's platform line ("cpu (virtual devices)", "tpu-v5p (compiled for ...)",
    "h100 (compiled for ...)", "gpu (...)"); "other" for HLO read from dump files."""
    name = platform.lower()
    if name.startswith("as dumped"):
        return "other"
    return "cpu" if "cpu" in name else "tpu" if "tpu" in name else "gpu"


def compiler_change(before: dict[str, str], after: dict[str, str], platforms: set[str]) -> str | None:
    """A sentence naming the releases that differ between the baseline's compile and this one, for the
    platforms compared; None when they match or the baseline recorded none."""
    if not before:
        return None
    keys = ["jax", "jaxlib"]
    for family in sorted({_platform_family(p) for p in platforms}):
        keys.extend(_PLATFORM_COMPILERS.get(family, ()))
    changed = [k for k in keys if before.get(k) != after.get(k) and (k in before or k in after)]
    if not changed:
        return None
    def listed(versions: dict[str, str]) -> str:
        return ", ".join(f"{k} {versions.get(k, '(none)')}" for k in changed)
    return (f"the baseline was compiled with {listed(before)}; this run with {listed(after)}. XLA releases "
            "compile the same program differently, so a figure that moved may have moved with the compiler, "
            "not the code: re-baseline on the new release (gate --update, or --rebaseline-on-compiler-change)")


def compare(baseline: Baseline, current: dict[str, BaselineTarget], thresholds: GateThresholds,
            baseline_name: str) -> GateResult:
    rows: list[GateRow] = []
    for name in sorted(set(baseline.targets) | set(current)):
        before, after = baseline.targets.get(name), current.get(name)
        if before is None:
            rows.append(GateRow(target=name, metric="target", before=None, after=None, ratio=None,
                                alert="new target: not in the baseline (run gate --update to add it)"))
            continue
        if after is None:
            rows.append(GateRow(target=name, metric="target", before=None, after=None, ratio=None,
                                alert="missing: in the baseline but not analysed now"))
            continue
        if before.platform != after.platform:
            rows.append(GateRow(target=name, metric=f"platform {after.platform}", before=None, after=None,
                                ratio=None, alert=f"the baseline's figures come from {before.platform}"))
        r = _ratio(before.peak_bytes, after.peak_bytes)
        rows.append(GateRow(
            target=name, metric="peak bytes / device", before=before.peak_bytes, after=after.peak_bytes, ratio=r,
            alert=f"peak +{(r - 1) * 100:.1f}% (limit +{thresholds.peak_increase * 100:g}%)"
            if r is not None and r > 1 + thresholds.peak_increase else None,
        ))
        r = _ratio(before.collective_bytes, after.collective_bytes)
        rows.append(GateRow(
            target=name, metric="collective bytes / step", before=before.collective_bytes,
            after=after.collective_bytes, ratio=r,
            alert=f"collective bytes +{(r - 1) * 100:.1f}% (limit +{thresholds.collective_increase * 100:g}%)"
            if r is not None and r > 1 + thresholds.collective_increase else None,
        ))
        rows.extend(_time_rows(name, before, after, thresholds))
        mesh = {**before.mesh, **after.mesh}  # a sub-axis is said in words from its axis's size
        for group in sorted(set(before.bytes_by_kind) | set(after.bytes_by_kind)):
            b, a = before.bytes_by_kind.get(group), after.bytes_by_kind.get(group)
            if a != b:
                rows.append(GateRow(target=name, metric=f"  {_group_metric(group, mesh)}", before=b, after=a,
                                    ratio=_ratio(b, a)))
        known = {_identity(c) for c in before.collectives}
        unseen = [c for c in after.collectives if _identity(c) not in known]
        resized, unseen = _resized(before, after, unseen)
        for (kind, axes, dtype, source, old, now), pairs in sorted(resized.items()):
            was, grew = sum(b.bytes_per_step for b, _ in pairs), sum(a.bytes_per_step for _, a in pairs)
            if kind not in WATCHED_NEW_KINDS or max(was, grew) < thresholds.new_collective_bytes:
                continue
            times = f"{len(pairs)}x " if len(pairs) > 1 else ""
            rows.append(GateRow(
                target=name, before=was, after=grew, ratio=_ratio(was, grew),
                metric=f"  {times}{kind} over {axes_text(list(axes), mesh)} at {source} "
                f"{'grew' if grew >= was else 'shrank'} from {dtype}{list(old)} to {dtype}{list(now)}",
            ))
        for c in unseen:
            if c.kind in WATCHED_NEW_KINDS and c.bytes_per_step >= thresholds.new_collective_bytes:
                rows.append(GateRow(
                    target=name, metric=f"new {c.kind} {c.dtype}{c.shape} over {axes_text(c.mesh_axes, mesh)}",
                    before=None, after=c.bytes_per_step, ratio=None,
                    alert=f"new {c.kind} at {c.source or 'unknown line'} "
                    f"(limit {format_bytes(thresholds.new_collective_bytes)})",
                ))
        for err in sorted(set(after.errors) - set(before.errors)):
            rows.append(GateRow(target=name, metric=f"new error {err.split(' ', 1)[0]}", before=None, after=None,
                                ratio=None, alert=err))
    # A target new to the baseline is news, not a regression; everything else flagged fails.
    failing = [r for r in rows if r.alert and not (r.metric == "target" and r.alert.startswith("new target"))]
    return GateResult(baseline=baseline_name, passed=not failing, thresholds=thresholds, rows=rows)
