"""The baseline layouts ``suggest`` compiles beside the solver's choice (replicated, data-parallel, FSDP over
the free mesh axes), which lint's solver fixes compile too for a finding's arguments
(``advice.solver_candidates``): one definition, so the layout suggest recommends for a value is a candidate
lint checks for the same value."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ....passes.common.data_parallel import data_parallel_layout

Pins = dict[int, list[list[str]]]


def baseline_layouts(inputs: Sequence, state: Collection[int], free: Sequence[str], sizes: dict[str, int],
                     ) -> list[tuple[str, str, Pins]]:
    """Replicated, data-parallel and FSDP argument shardings over the ``free`` axes, each (name, description,
    every argument's sharding): state (``state``: the arguments that come back as results) is replicated, or
    sharded on its largest dimension the axes divide; other arguments on their leading dimension."""
    total = 1
    for a in free:
        total *= sizes[a]

    def on(shape, dim) -> list[list[str]]:
        return [list(free) if d == dim else [] for d in range(len(shape))]

    def data(x) -> list[list[str]]:
        return data_parallel_layout(x.shape, free, sizes) or [[] for _ in x.shape]

    def fsdp(x) -> list[list[str]]:
        dims = sorted((d for d, n in enumerate(x.shape) if n % total == 0), key=lambda d: (-x.shape[d], d))
        return on(x.shape, dims[0]) if dims else [[] for _ in x.shape]

    out: list[tuple[str, str, Pins]] = [
        ("replicated", summary("replicated", free), {x.index: [[] for _ in x.shape] for x in inputs})]
    out.append(("data-parallel", summary("data-parallel", free),
                {x.index: ([[] for _ in x.shape] if x.index in state else data(x)) for x in inputs}))
    out.append(("fsdp", summary("fsdp", free), {x.index: (fsdp(x) if x.index in state else data(x)) for x in inputs}))
    return out


def summary(name: str, free: Sequence[str]) -> str:
    """What the baseline ``name`` does, as suggest's versions and lint's fixes describe it."""
    return {"replicated": "every argument replicated",
            "data-parallel": f"state replicated, other arguments split on dimension 0 over {', '.join(free)}",
            "fsdp": f"state split on its largest dimension over {', '.join(free)}, other arguments on dimension 0",
            }[name]


# The baselines' names, in the order baseline_layouts gives them.
NAMES = ("replicated", "data-parallel", "fsdp")
