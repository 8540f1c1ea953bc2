"""SL404 host-transfer-in-loop: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast
import os

from ..common.python_calls import dotted
from ..models.report import Severity
from ..models.rule_codes import SL404
from .registry import Emitter, define_rule
from .source_facts import SourceContext, inside_jit, location, loops, names_in, walk_with_stack

_HOST_PULLS = {("np", "asarray"), ("np", "array"), ("numpy", "asarray"), ("numpy", "array"), ("jax", "device_get")}


def host_transfer_in_loop(ctx: SourceContext, out: Emitter) -> None:
    """A sharded result pulled to one place inside a loop.

    What it does
    ------------
    Reports `np.asarray`, `np.array`, `jax.device_get` and `jax.device_put` of a
    jitted function's result inside a `for` or `while` loop outside `jit`, or in a
    function such a loop calls (in any module of the program) on a sharded value
    passed to it.

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
            if not isinstance(node, ast.Call) or not node.args or not _is_pull(node):
                continue
            used = names_in(node.args[0]) & facts.sharded
            if used:
                out.emit(
                    f"{dotted(node.func)}({ast.unparse(node.args[0])}) moves the sharded result {sorted(used)[0]} to "
                    "one place on every iteration",
                    location(facts, node), fix=_FIX, subject=sorted(used)[0],
                )
    program = facts.program
    if program is None:
        return
    # A helper a loop calls, elsewhere in the program, pulling a sharded value it was passed.
    for node, stack in walk_with_stack(tree):
        if not isinstance(node, ast.Call) or not node.args or not _is_pull(node) or inside_jit(stack, facts) \
                or isinstance(node.args[0], ast.Call) or any(isinstance(n, _LOOPS) for n in stack):
            continue
        function = next((n for n in reversed(stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        site = program.called_in_loop.get(id(function)) if function is not None else None
        if function is None or site is None:
            continue
        used = program.sharded_names(node.args[0], program.scope_of(stack, facts.file))
        if used:
            out.emit(
                f"{dotted(node.func)}({ast.unparse(node.args[0])}) moves the sharded result {used[0]} to one place "
                f"on every iteration of the loop that calls {function.name} ({os.path.basename(site[0])}:{site[1]})",
                location(facts, node), fix=_FIX, subject=used[0],
            )


_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_FIX = "reduce it on the devices with a jitted helper first, or move it once after the loop"


def _is_pull(node: ast.Call) -> bool:
    name = dotted(node.func)
    parts = tuple(name.rsplit(".", 1)) if "." in name else ("", name)
    return parts in _HOST_PULLS or name == "jax.device_put"


RULE = define_rule(SL404, Severity.warning, host_transfer_in_loop)
