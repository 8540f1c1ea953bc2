"""SL401 replicated-device-put-multihost: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast
import os

from ..common.byte_sizes import per_process_count
from ..common.python_calls import dotted
from ..models.process_runs import GrowingTransfer
from ..models.report import Severity
from ..models.rule_codes import SL401
from .registry import Emitter, RuleTraits, define_rule
from .source_facts import SourceContext, inside_jit, location, walk_with_stack
from .source_program import GLOBAL, REPLICATED, is_replicated_spec


def replicated_device_put(ctx: SourceContext, out: Emitter) -> None:
    """A host value put on a replicated sharding in code that runs on several processes.

    What it does
    ------------
    In a program that uses several processes (the script or any first-party module
    it reaches calls `jax.distributed.initialize`, `jax.process_count` or
    `jax.process_index`), reports `jax.device_put(value, sharding)` where the
    sharding may be replicated (built from `P()`, or a tree of shardings any of
    which is, passed in from another function or module; also
    `jax.tree.map(lambda a, s: jax.device_put(a, s), tree, shardings)`) and the
    value is a host value, not already a global `jax.Array` (a jitted result,
    `jax.make_array_from_callback`, an earlier `device_put`).

    Why is this bad
    ---------------
    To build a global array from per-process host values, JAX checks that every
    process passed the same value, with a cross-host all-gather whose size grows
    with the number of processes. On a large job it is slow and can run out of
    host memory.

    Example
    -------
    ```python
    jax.distributed.initialize()
    table = jax.device_put(np_table, NamedSharding(mesh, P()))
    ```

    Fix
    ---
    Build the array from the local copy, which every process already has:
    `jax.make_array_from_callback(np_table.shape, sharding, lambda idx: np_table[idx])`.
    """
    tree, facts = ctx
    program = facts.program
    where = program.multiprocess_file if program is not None else None
    if not (facts.multiprocess or where):
        return
    for node, stack in walk_with_stack(tree):
        if not (isinstance(node, ast.Call) and dotted(node.func) in ("jax.device_put", "device_put")) \
                or inside_jit(stack, facts):
            continue
        sharding = node.args[1] if len(node.args) >= 2 else next(
            (k.value for k in node.keywords if k.arg == "device"), None)
        if sharding is None or not node.args:
            continue
        value = node.args[0]
        if program is not None:
            scope = program.scope_of(stack, facts.file)
            if not program.holds(REPLICATED, sharding, scope, built=True) \
                    or program.holds_only(GLOBAL, value, scope):
                continue
        elif not _literal_replicated(sharding):
            continue
        text = ast.unparse(value)
        line = f":{program.multiprocess_line}" if program is not None and program.multiprocess_line else ""
        across = "" if facts.multiprocess or not where else f" (multi-process: {os.path.basename(where)}{line})"
        out.emit(
            f"jax.device_put({text}, {ast.unparse(sharding)}) puts a host value on a sharding that may be "
            f"replicated, in multi-process code{across}: a cross-host all-gather that grows with the "
            "process count",
            location(facts, node),
            fix=f"jax.make_array_from_callback({text}.shape, sharding, lambda idx: {text}[idx])",
            subject=text,
        )


def _literal_replicated(sharding: ast.AST) -> bool:
    return isinstance(sharding, ast.Call) and dotted(sharding.func).endswith("NamedSharding") \
        and len(sharding.args) >= 2 and is_replicated_spec(sharding.args[1])


def measured_equality_check(kind: str, bytes_by_processes: list[tuple[int, int]]) -> tuple[str, str]:
    """SL401 measured by ``run --processes N`` (the run-wide pipeline's process rules): the message and fix
    for JAX's check that every process passed the same host value, a program whose ``kind`` collectives
    move ``bytes_by_processes`` per device at each process count."""
    return (f"device_put of a host value: JAX checks that every process passed the same value "
            f"(multihost_utils.assert_equal, a tiled process_allgather), whose {kind} grows with the "
            f"process count, per device: {per_process_count(bytes_by_processes)}",
            "jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])")


def _process_growth(growing: GrowingTransfer, is_equality_check: bool) -> tuple[str, str] | None:
    """JAX's check that every process passed the same value is this rule's (any other growing program is
    SL402's)."""
    return measured_equality_check(growing.kind, growing.bytes_by_processes) if is_equality_check else None


RULE = define_rule(SL401, Severity.warning, replicated_device_put, traits=RuleTraits(process_growth=_process_growth))
