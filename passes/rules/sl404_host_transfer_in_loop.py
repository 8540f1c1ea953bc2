"""SL404 host-transfer-in-loop: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast

from ..models.report import Severity
from ..models.rule_codes import SL404
from .registry import Emitter, define_rule
from .source_facts import SourceContext, dotted, location, loops, names_in

_HOST_PULLS = {("np", "asarray"), ("np", "array"), ("numpy", "asarray"), ("numpy", "array"), ("jax", "device_get")}


def host_transfer_in_loop(ctx: SourceContext, out: Emitter) -> None:
    """A sharded result pulled to one place inside a loop.

    What it does
    ------------
    Reports `np.asarray`, `np.array`, `jax.device_get` and `jax.device_put` of a
    jitted function's result inside a `for` or `while` loop outside `jit`.

    Why is this bad
    ---------------
    Each iteration gathers every shard of the array to one device or to the host,
    and blocks until the step that produced it has finished: the transfer grows
    with the array and the pipeline stalls.

    Example
    -------
    ```python
    for i in range(steps):
        v = step(v)
        history.append(np.asarray(v))
    ```

    Fix
    ---
    Keep the value on the devices; reduce it first with a jitted helper and
    transfer the small result, or transfer once after the loop.
    """
    tree, facts = ctx
    for loop in loops(tree):
        for node in ast.walk(loop):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = dotted(node.func)
            parts = tuple(name.rsplit(".", 1)) if "." in name else ("", name)
            if parts not in _HOST_PULLS and name not in ("jax.device_put",):
                continue
            used = names_in(node.args[0]) & facts.sharded
            if used:
                out.emit(
                    f"{name}({ast.unparse(node.args[0])}) moves the sharded result {sorted(used)[0]} to one place "
                    "on every iteration",
                    location(facts, node), fix="reduce it on the devices with a jitted helper first, or move it once "
                    "after the loop", subject=sorted(used)[0],
                )


RULE = define_rule(SL404, Severity.warning, host_transfer_in_loop)
