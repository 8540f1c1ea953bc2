"""A target's sharding problem as ``suggest`` builds it, and lint's and check's solver fixes too: the
suggest pipeline's stages (``passes/pipelines/suggest.py``: signature, rules, graph, problem) over the
program's StableHLO, the free axes and the fixed arguments read against the signature their callbacks
(the mesh checked); and the pipeline's solve-and-refine loop with the StableHLO edits it needs, which only
the analyzer makes. suggest's request is read into these in ``commands/suggest/target.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ....passes.models.errors import ShardyRejected
from ....passes.pipelines import suggest as pipeline
from ....passes.pipelines.plan_check import PlanMemo
from ....passes.pipelines.suggest import Refined, ResultNotATensor, ShardingGraph, ShardingProblem
from ...adapter import jax_adapter
from ...context.config import Settings
from ...errors import ShardLintInputError
from ...supervision import isolation
from ..sharding_edits import with_entry_shardings


@dataclass
class SuggestTarget:
    name: str
    lowered: Any
    text: str
    module: Any
    sig: Any
    problem: ShardingProblem
    fixed: dict[str, tuple[list[list[str]], str]]  # argument path -> (sharding, why)
    state: tuple  # RoundTrips: the outputs that are inputs coming back
    graph: ShardingGraph  # the graph the problem was built from (its tensor ids are the refine loop's)
    ownership: Any
    # StableHLO text -> (Version, report) of each program compiled for this target so far.
    compiled: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # In this process on several cores: the versions compiled side by side (suggest's versions.SideBySide),
    # else None.
    side_by_side: Any = None


# Input path -> (sharding, why) of the arguments held as they are, read against the entry's signature.
FixedShardings = Callable[[Any], dict[str, tuple[list[list[str]], str]]]


def problem_of_text(name: str, text: str, axes: tuple[str, ...], settings: Settings, fixed: FixedShardings,
                    where: str, lowered: Any = None) -> SuggestTarget:
    """The target's sharding problem from its StableHLO text over the mesh axes ``axes`` (all with more
    than one device where empty), ``fixed`` the arguments held (``lowered``: the jitted program it came
    from, for suggest's Python text; None where only the text is known: check's snapshot, lint's fix
    checks)."""
    module = jax_adapter.parse_stablehlo(text)

    def free_axes(sig) -> tuple[str, ...]:
        sizes = dict(sig.mesh.axes)
        if sig.mesh.size <= 1 or not sig.mesh_name:
            raise ShardLintInputError(where, f"target {name!r} has no mesh of several devices to shard over (give "
                                      "its inputs NamedShardings on a jax.make_mesh mesh)")
        free = tuple(axes) or tuple(a for a, n in sig.mesh.axes if n > 1)
        for a in free:
            if a not in sizes:
                raise ShardLintInputError("--axes", f"no mesh axis {a!r} (mesh: {', '.join(sizes)})")
        isolation.phase(where, f"building the sharding problem of target {name!r}")
        return free

    spec = settings.solver_device_spec
    try:
        built = pipeline.suggest_problem(module, settings.pass_config.ownership, free_axes, fixed, spec,
                                         settings.budget_bytes)
    except ShardyRejected as e:
        raise ShardLintInputError(where, f"target {name!r}: Shardy rejects the module: {e}") from e
    except ResultNotATensor as e:
        raise ShardLintInputError(where, f"target {name!r}: result {e.index} is not a tensor value") from e
    return SuggestTarget(name, lowered, text, module, built.signature, built.problem, built.fixed, built.state,
                         built.graph, settings.pass_config.ownership)


def refine(t: SuggestTarget, problem: ShardingProblem, method: str, time_limit: float, spec,
           memo: PlanMemo | None = None) -> Refined:
    """The suggest pipeline's solve-and-refine loop over the target: each plan checked by propagating its
    shardings over the module with them pinned (the entry's attributes edited, the text parsed again);
    ``memo``: the solutions runs before made (``solve_memo.py``)."""

    def repinned(arguments: dict[int, list[list[str]]], results: dict[int, list[list[str]]]):
        return jax_adapter.parse_stablehlo(with_entry_shardings(t.module, results, t.sig.mesh_name, arguments))

    return pipeline.refine(problem, t.graph, repinned, t.ownership, method, time_limit, spec, memo)

