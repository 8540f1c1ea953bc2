"""SL403 feedback-loop-without-out-shardings: the check, whose docstring is the rule\'s documentation."""

from __future__ import annotations

import ast

from ..common.python_calls import dotted
from ..models.report import Severity
from ..models.rule_codes import SL403
from .registry import Emitter, define_rule
from .source_facts import SourceContext, assigned_names, location, loops, names_in


def feedback_without_out_shardings(ctx: SourceContext, out: Emitter) -> None:
    """A jitted step whose outputs are fed back as its inputs, with no `out_shardings`.

    What it does
    ------------
    Reports a call in a loop body that assigns a jitted function's results to
    names it also passes in (`state = step(state, batch)`) when that function was
    jitted without `out_shardings`.

    Why is this bad
    ---------------
    Without `out_shardings` XLA picks each output's layout for this step alone. If
    it differs from the layout the inputs came in, the next call reshards the
    state on entry, every iteration, or compiles again for the new layout.

    Example
    -------
    ```python
    step = jax.jit(train_step)
    for batch in data:
        state = step(state, batch)
    ```

    Fix
    ---
    `jax.jit(train_step, out_shardings=state_shardings)`; `jax-shard-lint lint`
    prints the text to paste (SL201), and `jax-shard-lint rewrite` validates it.
    """
    tree, facts = ctx
    for loop in loops(tree):
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            fn = dotted(node.value.func)
            if fn not in facts.jitted_without_out_shardings:
                continue
            fed_back = set().union(*(assigned_names(t) for t in node.targets)) & set().union(
                *(names_in(a) for a in node.value.args), *(names_in(k.value) for k in node.value.keywords))
            if fed_back:
                out.emit(
                    f"{fn}'s outputs ({', '.join(sorted(fed_back))}) are fed back as its inputs in a loop, but it "
                    "was jitted without out_shardings",
                    location(facts, node),
                    fix=f"jax.jit(..., out_shardings=...) for {fn}, pinned to the inputs' shardings",
                    subject=fn,
                )


RULE = define_rule(SL403, Severity.warning, feedback_without_out_shardings)
