"""Source rules: an AST pass over the user's script (and the local modules it
imports) for patterns that cost nothing on one device and bite at scale.

The pass is pure: it takes file texts and returns findings. It tracks names
bound to jitted functions (``f = jax.jit(g)``, ``@jax.jit``) and the names their
calls return ("sharded results"), and looks at what happens to them outside
``jit`` and inside loops.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..models.report import Finding, Severity, SourceLocation
from .registry import RULES, Emitter, rule

_REDUCTIONS = {"any", "all", "sum", "max", "min", "mean", "isnan", "isinf", "isfinite", "linalg.norm", "norm", "prod"}
_HOST_PULLS = {("np", "asarray"), ("np", "array"), ("numpy", "asarray"), ("numpy", "array"), ("jax", "device_get")}
_MULTIPROCESS = {"process_count", "process_index", "initialize"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_jit(call: ast.AST) -> bool:
    return isinstance(call, ast.Call) and _dotted(call.func) in ("jax.jit", "jit", "pjit", "jax.experimental.pjit.pjit")


def _has_kw(call: ast.Call, name: str) -> bool:
    return any(k.arg == name for k in call.keywords)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _targets(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*(_targets(e) for e in node.elts)) if node.elts else set()
    return set()


@dataclass
class _Facts:
    file: str
    jitted: dict[str, ast.AST] = field(default_factory=dict)  # name -> jit call or decorated def
    jitted_without_out_shardings: set[str] = field(default_factory=set)
    sharded: set[str] = field(default_factory=set)
    jitted_bodies: set[int] = field(default_factory=set)  # ids of FunctionDef nodes that are jitted
    multiprocess: bool = False


def _collect(tree: ast.Module, file: str) -> _Facts:
    facts = _Facts(file)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _MULTIPROCESS and _dotted(node.value) in (
                "jax", "jax.distributed"):
            facts.multiprocess = True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                call = dec if isinstance(dec, ast.Call) else None
                base = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
                if base in ("jax.jit", "jit") or (base in ("functools.partial", "partial") and call and call.args
                                                   and _dotted(call.args[0]) in ("jax.jit", "jit")):
                    facts.jitted[node.name] = node
                    facts.jitted_bodies.add(id(node))
                    if not (call and _has_kw(call, "out_shardings")):
                        facts.jitted_without_out_shardings.add(node.name)
        if isinstance(node, ast.Assign) and _is_jit(node.value):
            for name in _targets(node.targets[0]):
                facts.jitted[name] = node.value
                if not _has_kw(node.value, "out_shardings"):
                    facts.jitted_without_out_shardings.add(name)
    # Names bound from calling a jitted function hold sharded results.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and _dotted(node.value.func) in facts.jitted:
            for t in node.targets:
                facts.sharded |= _targets(t)
    return facts


def _loops(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            yield node


def _inside_jit(node_stack: list[ast.AST], facts: _Facts) -> bool:
    return any(id(n) in facts.jitted_bodies for n in node_stack)


def _walk_with_stack(tree: ast.AST):
    stack: list[ast.AST] = []

    def visit(node):
        stack.append(node)
        yield node, stack
        for child in ast.iter_child_nodes(node):
            yield from visit(child)
        stack.pop()

    yield from visit(tree)


@dataclass(frozen=True)
class SourceFacts:
    """What the source pass found, for one file."""

    file: str
    findings: tuple[Finding, ...]


def check_source(file: str, text: str, disabled: frozenset[str] = frozenset(),
                 severities: dict | None = None) -> SourceFacts:
    try:
        tree = ast.parse(text, filename=file)
    except SyntaxError:
        return SourceFacts(file, ())
    facts = _collect(tree, file)
    severities = severities or {}
    out: list[Finding] = []
    for code in sorted(RULES):
        r = RULES[code]
        if r.scope != "source" or code in disabled:
            continue
        emitter = Emitter(r, severities.get(code, r.severity))
        r.check((tree, facts), emitter)
        out.extend(emitter.findings)
    out.sort(key=lambda f: (f.source.line if f.source else 0, f.rule))
    return SourceFacts(file, tuple(out))


def _loc(facts: _Facts, node: ast.AST) -> SourceLocation:
    return SourceLocation(file=facts.file, line=node.lineno)


@rule("SL401", "replicated-device-put-multihost", Severity.warning, scope="source")
def replicated_device_put(ctx, out: Emitter) -> None:
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
        if not (isinstance(node, ast.Call) and _dotted(node.func) in ("jax.device_put", "device_put")):
            continue
        if len(node.args) < 2:
            continue
        sharding = node.args[1]
        if isinstance(sharding, ast.Call) and _dotted(sharding.func).endswith("NamedSharding") \
                and len(sharding.args) >= 2 and isinstance(sharding.args[1], ast.Call) \
                and _dotted(sharding.args[1].func) in ("P", "PartitionSpec", "jax.sharding.PartitionSpec") \
                and not sharding.args[1].args:
            value = ast.unparse(node.args[0])
            out.emit(
                f"jax.device_put({value}, NamedSharding(..., P())) in multi-process code runs a cross-host "
                "all-gather that grows with the process count",
                _loc(facts, node),
                fix=f"jax.make_array_from_callback({value}.shape, sharding, lambda idx: {value}[idx])",
                subject=value,
            )


@rule("SL402", "reduction-outside-jit", Severity.warning, scope="source")
def reduction_outside_jit(ctx, out: Emitter) -> None:
    """A reduction or NaN/Inf check on a sharded result, outside `jit`.

    What it does
    ------------
    Reports `jnp.any`, `jnp.all`, `jnp.sum`, `jnp.max`, `jnp.isnan`,
    `jnp.isfinite` and similar reductions applied, outside any jitted function, to
    a value returned by a jitted function (a sharded array).

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
    for node, stack in _walk_with_stack(tree):
        if not isinstance(node, ast.Call) or _inside_jit(stack, facts):
            continue
        name = _dotted(node.func)
        head, _, tail = name.partition(".")
        if head not in ("jnp", "jax.numpy") or tail not in _REDUCTIONS:
            continue
        if any(isinstance(p, ast.Call) and _dotted(p.func).split(".", 1)[0] == "jnp" and p is not node
               for p in stack[:-1]):
            continue  # report the outermost jnp call of an expression once
        used = _names(node) & facts.sharded
        if used:
            out.emit(
                f"{ast.unparse(node)} reduces the sharded result {sorted(used)[0]} outside jit",
                _loc(facts, node),
                fix="a module-level jitted helper: jax.jit(lambda x: "
                f"{ast.unparse(node).replace(sorted(used)[0], 'x')})",
                subject=sorted(used)[0],
            )


@rule("SL403", "feedback-loop-without-out-shardings", Severity.warning, scope="source")
def feedback_without_out_shardings(ctx, out: Emitter) -> None:
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
    for loop in _loops(tree):
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            fn = _dotted(node.value.func)
            if fn not in facts.jitted_without_out_shardings:
                continue
            fed_back = set().union(*(_targets(t) for t in node.targets)) & set().union(
                *(_names(a) for a in node.value.args), *(_names(k.value) for k in node.value.keywords))
            if fed_back:
                out.emit(
                    f"{fn}'s outputs ({', '.join(sorted(fed_back))}) are fed back as its inputs in a loop, but it "
                    "was jitted without out_shardings",
                    _loc(facts, node), fix=f"jax.jit(..., out_shardings=...) for {fn}, pinned to the inputs' shardings",
                    subject=fn,
                )


@rule("SL404", "host-transfer-in-loop", Severity.warning, scope="source")
def host_transfer_in_loop(ctx, out: Emitter) -> None:
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
    for loop in _loops(tree):
        for node in ast.walk(loop):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = _dotted(node.func)
            parts = tuple(name.rsplit(".", 1)) if "." in name else ("", name)
            if parts not in _HOST_PULLS and name not in ("jax.device_put",):
                continue
            used = _names(node.args[0]) & facts.sharded
            if used:
                out.emit(
                    f"{name}({ast.unparse(node.args[0])}) moves the sharded result {sorted(used)[0]} to one place "
                    "on every iteration",
                    _loc(facts, node), fix="reduce it on the devices with a jitted helper first, or move it once "
                    "after the loop", subject=sorted(used)[0],
                )
