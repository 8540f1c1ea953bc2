"""The oracle of tests/real_models' printed-fix tests: the layout a printed fix describes (its
``fix_check.change``: the arguments it names given its PartitionSpec, ``donate_argnums``, or the state given
the layout the written step returns it in) made the way a user makes it, ``jax.jit(...).lower(...).compile()``d
(a move with every state output returned on its argument's sharding, as its text says),
and XLA's figures of it: ``memory_analysis()``'s peak and the collectives in the compiled text plus the state
the next step reshards on entry (hlo_oracle.py). Better is the issue's definition with the tolerance the tool
states: one figure lower by more than 0.5% of it, the other grown by at most 1% of the written peak."""

from __future__ import annotations

import inspect
import json
import re
from collections import OrderedDict
from typing import Any

import jax
from hlo_oracle import step_traffic, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# The tolerance the tool states (analyzer/backend/fix_verdicts.py's TOLERANCE_TEXT), restated as the oracle's.
NOISE, GROWTH = 0.005, 0.01
STATE_LAYOUTS = "in_shardings giving each state input the layout the step returns it in"
DONATION = re.compile(r"jax\.jit\(\.\.\., donate_argnums=\((\d+(?:, \d+)*),?\)\)$")
CONSTRAINT = re.compile(r"sharding_constraint\[\d+\] -> (P\(.*\))$")


def argument_names(fn, options) -> list[str | None]:
    """The step's argument names as the fix names them, None for a static argument (never moved)."""
    static = options.get("static_argnums", ())
    static = static if isinstance(static, tuple) else (static,)
    return [None if i in static else n for i, n in enumerate(inspect.signature(fn).parameters)]


def paths(change: str) -> tuple[list[re.Pattern], P]:
    """The argument paths a parameter change names (``[*]`` any layer) and the PartitionSpec it gives them:
    ``params[...]['kernel'] with opt_state[0].mu[...] and opt_state[0].nu[...] -> P(None, 'model')``."""
    named, spec = change.rsplit(" -> ", 1)
    patterns = [re.compile(re.escape(p).replace(re.escape("[*]"), r"\[[^\]]+\]") + "$")
                for p in re.split(r", | with | and ", named)]
    # The labels after the spec say which version it is: "P() (returned in that layout) (replicated)", one of
    # suggest's baselines the solver fixes compile (advice/baselines.py).
    return patterns, eval(re.sub(r"(\s+\([^()]*\))+$", "", spec), {"P": P})


def with_layout(args, names, patterns, spec):
    matched = set()

    def leaf(arg_name):
        def move(path, x):
            full = arg_name + jax.tree_util.keystr(path)
            hits = [p for p in patterns if p.match(full)]
            if not hits:
                return x
            matched.update(hits)
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(x.sharding.mesh, spec))
        return move

    moved = tuple(a if n is None else jax.tree_util.tree_map_with_path(leaf(n), a) for n, a in zip(names, args))
    assert matched == set(patterns), f"paths the fix names match no argument: {set(patterns) - matched}"
    return moved


# The programs this process compiled last, by their lowered text (source locations included): two findings whose
# fixes describe one layout (SL201's and SL203's state fix, the donation several findings print) are one compile.
_RECENT: OrderedDict[str, Any] = OrderedDict()
_RECENT_KEPT = 4


def _compiled(lowered):
    text = lowered.as_text(debug_info=True)
    if text not in _RECENT:
        _RECENT[text] = lowered.compile()
        while len(_RECENT) > _RECENT_KEPT:
            _RECENT.popitem(last=False)
    _RECENT.move_to_end(text)
    return _RECENT[text]


def measured(fn, options, args, state_count, **jit):
    """The step compiled as jit compiles it (``jit``: options added to the step's own), and XLA's (peak, traffic)."""
    compiled = _compiled(jax.jit(fn, **{**options, **jit}).lower(*args))
    return compiled, (xla_peak(compiled), step_traffic(compiled, args[:state_count]))


def fixed(change, fn, options, args, state_count, written, constrained=None):
    """XLA's (peak, traffic) of the layout ``change`` describes, made the way a user writes it; ``constrained``:
    the step with its constraint given another PartitionSpec (``spec -> (fn, options, args)``), for an SL204
    change (``sharding_constraint[1] -> P('data')``), where the configuration has one."""
    donation = DONATION.match(change)
    constraint = CONSTRAINT.match(change)
    if constraint and constrained is not None:
        return measured(*constrained(eval(constraint.group(1), {"P": P})), state_count)[1]
    if donation:
        donated = tuple(int(n) for n in donation.group(1).split(", "))  # one argument, or several together
        return measured(fn, options, args, state_count, donate_argnums=donated)[1]
    if change == STATE_LAYOUTS:  # each state input given the sharding XLA returns it in
        returned = jax.tree.leaves(written.output_shardings[:state_count])
        state = jax.tree.unflatten(jax.tree.structure(args[:state_count]), [
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
            for x, s in zip(jax.tree.leaves(args[:state_count]), returned)])
        return measured(fn, options, tuple(state) + tuple(args[state_count:]), state_count)[1]
    assert " -> " in change, f"a printed fix the test cannot rebuild: {change!r}"
    moved = args
    # A tensor-parallel pair's change moves each group of paths to its own PartitionSpec (SL103's pair fix).
    for move in change.split(" together with "):
        patterns, spec = paths(move)
        moved = with_layout(moved, argument_names(fn, options), patterns, spec)
    pins = returning_state(fn, options, args, moved, state_count, written)
    return measured(fn, options, moved, state_count, out_shardings=pins)[1]


def returning_state(fn, options, args, moved, state_count, written):
    """The out_shardings a move's text says: the moved state in its new layout, the state the written step
    returns as it takes it on its argument's sharding, the rest (state the written step returns on another
    layout: SL201's) and the other outputs as the step states them."""
    results = jax.jit(fn, **options).lower(*moved).out_info
    stated = options.get("out_shardings")
    rest = tuple(stated[state_count:]) if isinstance(stated, tuple) else (None,) * (len(results) - state_count)
    before, after = jax.tree.leaves(args[:state_count]), jax.tree.leaves(moved[:state_count])
    returned = jax.tree.leaves(written.output_shardings[:state_count])
    pins = [a.sharding if a is not b or (b.sharding is not None and out.is_equivalent_to(b.sharding, len(b.shape)))
            else None for b, a, out in zip(before, after, returned, strict=True)]
    return (*jax.tree.unflatten(jax.tree.structure(tuple(moved[:state_count])), pins), *rest)


def better(written, after) -> bool:
    """One figure lower beyond the noise; the other grown by no more than its noise, or else by no more than
    the stated share of the peak and than the first fell."""
    (peak0, traffic0), (peak1, traffic1) = written, after
    lower = peak1 < peak0 - NOISE * peak0 or traffic1 < traffic0 - NOISE * max(traffic0, 1)
    peak_up, traffic_up = peak1 - peak0, traffic1 - traffic0
    peak_ok = peak_up <= NOISE * peak0 or peak_up <= min(GROWTH * peak0, -traffic_up)
    traffic_ok = traffic_up <= NOISE * max(traffic0, 1) or traffic_up <= min(GROWTH * peak0, -peak_up)
    return lower and peak_ok and traffic_ok


def rebuildable(change: str, fn, options, constrained=None) -> bool:
    """Whether ``fixed`` can make the layout ``change`` describes: a donation, the state's returned layouts, a
    constraint where the configuration restates it, or arguments of the step given a PartitionSpec."""
    if DONATION.match(change) or change == STATE_LAYOUTS:
        return True
    if CONSTRAINT.match(change):
        return constrained is not None
    first = re.match(r"[A-Za-z_]\w*", change)
    return " -> " in change and first is not None and first.group(0) in argument_names(fn, options)


def lint_findings(cli, monkeypatch, path, lint_options, libraries):
    """The one target lint reports for the script with each fix compiled (lint's default), as JSON."""
    from ci_deps import require

    for lib in libraries:
        require(lib, f"{lib} is not installed (the [test] extra)")
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    result = cli("lint", path, *lint_options, "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    [target] = json.loads(result.out)["targets"]
    return target


def assert_fixes_measured(target, fn, options, args, state_count, constrained=None) -> set[str]:
    """Every finding has a fix; each printed one (its check's verdict better) is measured better by XLA with
    the figures it prints; each not printed says what was tried, and where the oracle can make the change
    tried, XLA measures it as the check says (its figures, and not better). The rules whose fix is printed."""
    findings = target["findings"]
    assert findings and all(f["fix"] for f in findings), "a finding without a fix says why it has none"
    written, as_written = measured(fn, options, args, state_count)
    printed = set()
    for f in findings:
        check = f["fix_check"]
        if check is None:  # advice with no layout to compile (SL104's on jax 0.12's Equinox step) says so
            assert re.search(r"^no fix compiled: .*not checked", f["fix"]), f"{f['rule']}'s fix is printed unchecked"
            continue
        assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written, f["rule"]
        after = None
        if check["peak_bytes_after"] is not None and rebuildable(check["change"], fn, options, constrained):
            after = fixed(check["change"], fn, options, args, state_count, written, constrained)
            # The figures the check prints are XLA's of that layout.
            assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after, (f["rule"], check["change"])
        if check["verdict"] != "better":  # not the fix: what was tried and what it measured
            assert "checked:" not in f["fix"], f["fix"]
            assert re.search(r"tried|not offered|no sharding change found|neither fix", f["fix"]), f["fix"]
            assert after is None or not better(as_written, after), (f["rule"], check["change"], as_written, after)
            continue
        assert after is not None, f"a printed fix the test cannot rebuild: {check['change']!r}"
        assert better(as_written, after), (f["rule"], check["change"], as_written, after)
        printed.add(f["rule"])
    return printed
