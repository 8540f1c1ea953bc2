"""A loop XLA knows no trip count for, whose condition ANDs a data-dependent test with ``k < MAX_STEPS``
(fixtures/scripts/bounded_solver_loop.py, as diffrax's bounded loops are written): its collectives are counted
once, with the bound the condition proves as their upper count; ``--loop-trips N`` counts them N times (never
past that bound); and the rules judge the bound where the once-count is under a threshold (newbie16 F2: a
diffrax step's in-loop reshards were filtered out as 264 KiB). Every expected figure is read here from XLA's
compiled text: the bound is the constant the condition compares the counter with, the bytes the gather's
result shape in the loop body."""

import os
import re

import pytest
from conftest import FIXTURES
from scripts import script_module

from jax_shard_lint.passes.common.byte_sizes import format_bytes
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.loop_bounds import loop_trip_bound
from jax_shard_lint.passes.hlo.parser import parse_hlo_module

SCRIPT = os.path.join(FIXTURES, "scripts", "bounded_solver_loop.py")
_DTYPE_BYTES = {"f32": 4, "s32": 4, "bf16": 2, "pred": 1}


@pytest.fixture(scope="module")
def compiled_text():
    return script_module(SCRIPT).shard_lint_targets()["settle"].compile().as_text()


def _block(text: str, name: str) -> str:
    return re.search(rf"\n%?{re.escape(name)} [^\n]*\{{\n(.*?)\n\}}", text, re.S).group(1)


def _xla_loop(text: str) -> tuple[str, str, int]:
    """The loop's body and condition, and the constant its condition compares the counter with (LT), from the
    condition or the fusion it calls."""
    [loop] = re.findall(r"= [^\n]* while\([^\n]*", text)
    assert "known_trip_count" not in loop  # XLA knows no trip count: the test's premise
    body, cond = re.search(r"body=%?([\w.\-]+)", loop).group(1), re.search(r"condition=%?([\w.\-]+)", loop).group(1)
    blocks = [_block(text, cond)] + [_block(text, f) for f in re.findall(r"calls=%?([\w.\-]+)", _block(text, cond))]
    constants = {name: int(v) for b in blocks for name, v in re.findall(r"%?([\w.\-]+) = s32\[\] constant\((\d+)\)", b)}
    [bound] = [constants[c] for b in blocks for c in re.findall(
        r"compare\(%?[\w.\-]+, %?([\w.\-]+)\), direction=LT", b) if c in constants]
    return body, cond, bound


def _xla_body_gather_bytes(text: str, body: str) -> int:
    """The bytes of the body's gathers, one size (the cumsum's reshard and the matmul's gather of its operand: XLA's
    metadata names them apart on 0.10 and not on 0.12)."""
    sizes = set()
    for dtype, dims in re.findall(r"= (\w+)\[([\d,]*)\][^ ]* all-gather(?:-start)?\(", _block(text, body)):
        n = _DTYPE_BYTES[dtype]
        for d in dims.split(","):
            n *= int(d)
        sizes.add(n)
    [size] = sizes
    return size


def test_the_bound_is_the_constant_xlas_condition_compares_the_counter_with(compiled_text):
    body, _, bound = _xla_loop(compiled_text)
    module = parse_hlo_module(compiled_text)
    [loop] = [i for c in module.computations.values() for i in c.instructions if i.opcode == "while"]
    assert loop_trip_bound(module, loop) == bound
    in_loop = [c for c in find_collectives(module, None).collectives if c.computation == body]
    assert in_loop and all(c.count == 1 and c.count_is_lower_bound and c.count_upper_bound == bound for c in in_loop)
    # The hint counts each such loop N times, never past the bound XLA proves.
    hinted = {c.hlo_name: c for c in find_collectives(module, None, assumed_trips=10).collectives}
    assert all(hinted[c.hlo_name].count == 10 and hinted[c.hlo_name].count_assumed
               and not hinted[c.hlo_name].count_is_lower_bound for c in in_loop)
    capped = {c.hlo_name: c.count for c in find_collectives(module, None, assumed_trips=10 * bound).collectives}
    assert all(capped[c.hlo_name] == bound for c in in_loop)


def test_a_reshard_under_the_threshold_once_but_over_it_at_the_bound_is_named_not_filtered(cli, compiled_text):
    body, _, bound = _xla_loop(compiled_text)
    gather = _xla_body_gather_bytes(compiled_text, body)
    assert gather < 16 * 1024**2 <= gather * bound  # the premise: under the default threshold once, over at the bound
    result = cli("lint", SCRIPT, "--fail-on", "never", "--no-fix-check", "--no-cache")
    assert result.code == 0, result.err
    out = " ".join(result.out.split())
    assert "SL105" not in out
    assert re.search(rf"1 resharding collective in loops whose trip count XLA does not know, all-gather[\w.]* "
                     rf"\(bounded_solver_loop\.py:\d+\), moves at least {re.escape(format_bytes(gather))} per step "
                     rf"per device, up to {re.escape(format_bytes(gather * bound))} at the bound of {bound} runs per "
                     r"step its loop's condition proves", out), out
    assert f"1-{bound}" in result.out  # the table's count: at least once, at most the bound

    # Judged by the bound: SL102 at a threshold between the once-bytes and the bound's.
    result = cli("lint", SCRIPT, "--fail-on", "never", "--no-fix-check", "--no-cache",
                 "--threshold", "loop-collective-bytes=16MiB")
    out = " ".join(result.out.split())
    assert re.search(rf"SL102 \[warning\] [\w/]*bounded_solver_loop\.py:\d+ all-gather over model run at least once "
                     rf"per step in a loop: at least {re.escape(format_bytes(gather))} per step per device, up to "
                     rf"{re.escape(format_bytes(gather * bound))} at the bound of {bound} runs", out), out


def test_loop_trips_counts_each_unknown_loop_as_the_user_says_and_the_rules_judge_that(cli, compiled_text):
    body, _, bound = _xla_loop(compiled_text)
    gather = _xla_body_gather_bytes(compiled_text, body)
    trips = 40
    assert gather * trips >= 16 * 1024**2 and trips < bound
    result = cli("lint", SCRIPT, "--fail-on", "never", "--no-fix-check", "--no-cache", "--loop-trips", str(trips))
    assert result.code == 0, result.err
    out = " ".join(result.out.split())
    assert "as --loop-trips counts them" in out and "at least" not in out
    assert re.search(rf"SL105 \[warning\] [\w/]*bounded_solver_loop\.py:\d+ all-gather over model reshards [^)]*\("
                     rf"{re.escape(format_bytes(gather))}\), {trips}x per step as --loop-trips counts it", out), out
    assert cli("lint", SCRIPT, "--loop-trips", "0").code == 2


def test_a_nest_of_unknown_loops_takes_the_hint_once_and_its_bounds_multiply():
    """A solver's step loop around its stage loop, both data-dependent and bounded (diffrax's checkpointed
    loops): --loop-trips N counts the inner body N times per step (what a user knows is a per-step count), not
    N x N; its upper count is the product of the two bounds XLA's conditions compare with."""
    import jax
    import jax.numpy as jnp

    def solve(x):
        def stages(carry):
            y, j = carry
            return jnp.sin(y), j + 1

        def step(carry):
            y, k = carry
            y, _ = jax.lax.while_loop(lambda c: (jnp.sum(c[0]) > 0.1) & (c[1] < 7), stages, (y, 0))
            return y, k + 1

        return jax.lax.while_loop(lambda c: (jnp.sum(c[0]) > 0.5) & (c[1] < 64), step, (x, 0))[0]

    text = jax.jit(solve).lower(jax.ShapeDtypeStruct((16,), jnp.float32)).compile().as_text()
    module = parse_hlo_module(text)
    loops = [i for c in module.computations.values() for i in c.instructions if i.opcode == "while"]
    assert len(loops) == 2 and "known_trip_count" not in text
    bounds = {}
    for loop in loops:
        body = dict(loop.called())["body"]
        # XLA's constant: the s32 the condition (or its fusion) compares the counter with.
        cond = _block(text, dict(loop.called())["condition"])
        blocks = [cond] + [_block(text, f) for f in re.findall(r"calls=%?([\w.\-]+)", cond)]
        [bounds[body]] = {int(v) for b in blocks for v in re.findall(r"s32\[\] constant\((\d+)\)", b)} - {0, 1}
    assert sorted(bounds.values()) == [7, 64]  # the program's own: the stage loop's 7, the step loop's 64
    inner, outer = sorted(bounds, key=bounds.get)
    from jax_shard_lint.passes.hlo.collectives import computation_multiplicity
    once, hinted = computation_multiplicity(module), computation_multiplicity(module, 100)
    assert once.counts[inner] == once.counts[outer] == 1
    assert once.upper[inner] == bounds[inner] * bounds[outer] and once.upper[outer] == bounds[outer]
    assert hinted.counts[outer] == min(100, bounds[outer]) and hinted.counts[inner] == 100
