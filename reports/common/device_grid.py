"""Which devices hold which block of an array, drawn as an SVG grid (HTML reports)."""

from __future__ import annotations

from collections import defaultdict
from itertools import product
from math import prod

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


def _block_counts(sharding: list[list[str]], rank: int, mesh: dict[str, int]
                  ) -> tuple[list[list[str]], dict[tuple[int, ...], list[int]], list[int]]:
    """Each dimension's axis labels, the devices holding each block (by its index along every dimension) and
    how many blocks each dimension has."""
    names = list(mesh)
    sizes = [mesh[n] for n in names]
    dims = (sharding + [[]] * rank)[:rank]
    blocks: dict[tuple[int, ...], list[int]] = defaultdict(list)
    counts = [1] * rank
    for device in range(prod(sizes)):
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
        blocks[tuple(idx)].append(device)
    return dims, blocks, counts


def device_grid(sharding: list[list[str]] | None, shape: list[int], mesh: dict[str, int]) -> str:
    """Which devices hold which block of an array: dim 0's blocks as rows, dim 1's as columns, and one panel
    per block of the dimensions after them that are split (``P('data', None, 'model')``'s dim 2: two panels,
    each labelled), so a split past dim 1 is drawn, not left out."""
    if sharding is None or not mesh:
        return '<div class="muted">sharding unknown</div>'
    rank = max(len(shape), 2)
    dims, blocks, counts = _block_counts(sharding if shape else [], rank, mesh)
    rows, cols = counts[0], counts[1]
    further = [d for d in range(2, rank) if counts[d] > 1]
    panels = list(product(*(range(counts[d]) for d in further)))
    if rows * cols * len(panels) > MAX_GRID_CELLS:
        split = " x ".join(str(counts[d]) for d in [0, 1, *further])
        return f'<div class="muted">{split} blocks: too many to draw</div>'
    cell_w, cell_h, gap, char_w = 74, 30, 12, 7  # char_w: the 11px monospace labels' advance, rounded up
    titles = [", ".join(f"dim {d} ({'+'.join(dims[d])}) {b + 1}/{counts[d]}" for d, b in zip(further, panel))
              for panel in panels]
    title_h = 16 if further else 0
    panel_w = max([cols * cell_w, *(len(t) * char_w for t in titles)])
    w, h = len(panels) * panel_w + (len(panels) - 1) * gap, rows * cell_h + title_h
    cells = []
    for k, panel in enumerate(panels):
        x0 = k * (panel_w + gap)
        if further:
            cells.append(f'<text class="panel" x="{x0}" y="11">{e(titles[k])}</text>')
        for r in range(rows):
            for c in range(cols):
                key = tuple([r, c] + [panel[further.index(d)] if d in further else 0 for d in range(2, rank)])
                devs = blocks.get(key, [])
                label = ",".join(map(str, devs)) if len(devs) <= 4 else f"{devs[0]}..{devs[-1]} ({len(devs)})"
                hue = ((k * rows + r) * cols + c) * 47 % 360
                x, y = x0 + c * cell_w, title_h + r * cell_h
                cells.append(f'<rect x="{x}" y="{y}" width="{cell_w}" height="{cell_h}" '
                             f'fill="hsl({hue},55%,86%)" stroke="#555"/><text x="{x + cell_w / 2}" '
                             f'y="{y + 19}" text-anchor="middle">{e(label)}</text>')
    return (f'<svg class="grid" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="device grid">{"".join(cells)}</svg>')
