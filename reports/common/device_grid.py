"""Which devices hold which block of an array, drawn as an SVG grid (HTML reports)."""

from __future__ import annotations

from collections import defaultdict

from .html_page import e

MAX_GRID_CELLS = 64


def _axis_index(label: str, coord: int, size: int) -> tuple[int, int]:
    """(index, count) of a device's coordinate along one axis label."""
    if ":(" in label:
        pre_text, sub_text = label.split(":(")[1].split(")")
        pre, sub = int(pre_text), int(sub_text)
        rest = size // (pre * sub)
        return (coord // rest) % sub, sub
    return coord, size


def device_grid(sharding: list[list[str]] | None, shape: list[int], mesh: dict[str, int]) -> str:
    """Which devices hold which block of an array: dims 0 and 1 as rows and columns."""
    if sharding is None or not mesh:
        return '<div class="muted">sharding unknown</div>'
    names = list(mesh)
    sizes = [mesh[n] for n in names]
    n_devices = 1
    for s in sizes:
        n_devices *= s
    dims = (sharding + [[], []])[:2] if shape else [[], []]
    blocks: dict[tuple[int, int], list[int]] = defaultdict(list)
    counts = [1, 1]
    for device in range(n_devices):
        coords, rem = [], device
        for s in reversed(sizes):
            coords.append(rem % s)
            rem //= s
        coords.reverse()
        idx = []
        for d, labels in enumerate(dims):
            block, count = 0, 1
            for label in labels:
                base = label.split(":(")[0]
                if base not in mesh:
                    continue
                i, c = _axis_index(label, coords[names.index(base)], mesh[base])
                block, count = block * c + i, count * c
            idx.append(block)
            counts[d] = count
        blocks[(idx[0], idx[1])].append(device)
    if counts[0] * counts[1] > MAX_GRID_CELLS:
        return f'<div class="muted">{counts[0]} x {counts[1]} blocks: too many to draw</div>'
    cell_w, cell_h = 74, 30
    w, h = counts[1] * cell_w, counts[0] * cell_h
    cells = []
    for r in range(counts[0]):
        for c in range(counts[1]):
            devs = blocks.get((r, c), [])
            label = ",".join(map(str, devs)) if len(devs) <= 4 else f"{devs[0]}..{devs[-1]} ({len(devs)})"
            hue = (r * counts[1] + c) * 47 % 360
            cells.append(f'<rect x="{c * cell_w}" y="{r * cell_h}" width="{cell_w}" height="{cell_h}" '
                         f'fill="hsl({hue},55%,86%)" stroke="#555"/><text x="{c * cell_w + cell_w / 2}" '
                         f'y="{r * cell_h + 19}" text-anchor="middle">{e(label)}</text>')
    return (f'<svg class="grid" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="device grid">{"".join(cells)}</svg>')
