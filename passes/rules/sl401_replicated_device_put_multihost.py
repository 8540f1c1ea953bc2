"""SL401 replicated-device-put-multihost: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast

from ..models.report import Severity
from ..models.rule_codes import SL401
from .registry import Emitter, define_rule
from .source_facts import SourceContext, dotted, location


def replicated_device_put(ctx: SourceContext, out: Emitter) -> None:
    """A host value put on a replicated sharding in code that runs on several processes.

    What it does
    ------------
    In a script that uses several processes (it calls `jax.distributed.initialize`,
    `jax.process_count` or `jax.process_index`), reports
    `jax.device_put(value, NamedSharding(mesh, P()))`: a host value placed on a
    fully replicated sharding.

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
    if not facts.multiprocess:
        return
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and dotted(node.func) in ("jax.device_put", "device_put")):
            continue
        if len(node.args) < 2:
            continue
        sharding = node.args[1]
        if isinstance(sharding, ast.Call) and dotted(sharding.func).endswith("NamedSharding") \
                and len(sharding.args) >= 2 and isinstance(sharding.args[1], ast.Call) \
                and dotted(sharding.args[1].func) in ("P", "PartitionSpec", "jax.sharding.PartitionSpec") \
                and not sharding.args[1].args:
            value = ast.unparse(node.args[0])
            out.emit(
                f"jax.device_put({value}, NamedSharding(..., P())) in multi-process code runs a cross-host "
                "all-gather that grows with the process count",
                location(facts, node),
                fix=f"jax.make_array_from_callback({value}.shape, sharding, lambda idx: {value}[idx])",
                subject=value,
            )


RULE = define_rule(SL401, Severity.warning, replicated_device_put)
