"""SL402 reduction-outside-jit: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast

from ..common.byte_sizes import per_process_count
from ..common.python_calls import dotted
from ..models.process_runs import GrowingTransfer
from ..models.report import Severity
from ..models.rule_codes import SL402
from .registry import Emitter, RuleTraits, define_rule
from .source_facts import SourceContext, inside_jit, location, names_in, walk_with_stack

_REDUCTIONS = {"any", "all", "sum", "max", "min", "mean", "isnan", "isinf", "isfinite", "linalg.norm", "norm", "prod"}


def reduction_outside_jit(ctx: SourceContext, out: Emitter) -> None:
    """A reduction or NaN/Inf check on a sharded result, outside `jit`.

    What it does
    ------------
    Reports `jnp.any`, `jnp.all`, `jnp.sum`, `jnp.max`, `jnp.isnan`,
    `jnp.isfinite` and similar reductions (also inside `bool(...)` or a running
    `flag | jnp.any(...)`) applied outside any jitted function to a value
    returned by a jitted function (a sharded array): in the same function, or
    passed in as a parameter from another function or module of the program;
    the jitted function may itself arrive as a parameter (`step_fn(V)` in a
    solver loop handed `jax.jit(bellman)`).

    Why is this bad
    ---------------
    Outside `jit`, each `jnp` call is dispatched on its own: the NaN check
    `jnp.any(jnp.isnan(v))` materialises a full-size boolean array and reduces it
    in separate steps, often gathering shards, on every iteration.

    Example
    -------
    ```python
    for i in range(steps):
        v = step(v)
        if jnp.any(jnp.isnan(v)):
            break
    ```

    Fix
    ---
    Use a module-level jitted helper, `has_nan = jax.jit(lambda x:
    jnp.any(jnp.isnan(x)))`, so the reduction runs where the shards are and only
    a scalar comes back.
    """
    tree, facts = ctx
    program = facts.program
    for node, stack in walk_with_stack(tree):
        if not isinstance(node, ast.Call) or inside_jit(stack, facts):
            continue
        name = dotted(node.func)
        head, _, tail = name.partition(".")
        if head not in ("jnp", "jax.numpy") or tail not in _REDUCTIONS:
            continue
        if any(isinstance(p, ast.Call) and dotted(p.func).split(".", 1)[0] == "jnp" and p is not node
               for p in stack[:-1]):
            continue  # report the outermost jnp call of an expression once
        used = names_in(node) & facts.sharded
        if program is not None:
            used |= set(program.sharded_names(node, program.scope_of(stack, facts.file)))
        if used:
            subject = sorted(used)[0]
            out.emit(
                f"{ast.unparse(node)} reduces the sharded result {subject} outside jit",
                location(facts, node),
                fix=f"a module-level jitted helper: jax.jit(lambda x: {ast.unparse(node).replace(subject, 'x')})",
                subject=subject,
            )


def measured_growth(program: str, kind: str, bytes_by_processes: list[tuple[int, int]]) -> tuple[str, str]:
    """SL402 measured by ``run --processes N`` (the run-wide pipeline's process rules): the message and fix
    for a program compiled at the user's line whose ``kind`` collectives move more per device with more
    processes (``bytes_by_processes``: per device at each process count)."""
    return (f"{program} compiled here moves more per device with more processes ({kind}): "
            f"{per_process_count(bytes_by_processes)}",
            "keep the value sharded: reduce it inside a jitted function and move only the result")


def measured_fetch(processes: int, error: str) -> tuple[str, str]:
    """SL402 measured by ``run --processes N``: the message and fix for a script that runs as one process
    and fails as ``processes`` with ``error``, fetching an array that spans other processes' devices."""
    return (f"fetches a sharded array that spans other processes' devices: the script fails with {processes} "
            f"processes and runs with 1 ({error})",
            "reduce it on the devices with a module-level jitted helper and fetch only the small result, "
            "or gather it on purpose (multihost_utils.process_allgather)")


def _process_growth(growing: GrowingTransfer, is_equality_check: bool) -> tuple[str, str] | None:
    """A growing program other than JAX's check that every process passed the same value (SL401's)."""
    return None if is_equality_check else measured_growth(growing.program, growing.kind, growing.bytes_by_processes)


RULE = define_rule(SL402, Severity.warning, reduction_outside_jit,
                   traits=RuleTraits(process_growth=_process_growth, failed_fetch=measured_fetch))
