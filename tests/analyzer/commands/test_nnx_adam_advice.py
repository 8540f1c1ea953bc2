"""A newcomer's flax nnx step with optax Adam and sharding mistakes (fixtures/scripts/nnx_adam_step.py): one
recommendation per value across lint's findings and suggest's single move, each the program XLA compiles
here with jax.jit (memory_analysis()'s peak; the compiled text's collectives and the state the next step
reshards on entry), and a fix's text naming every value its check moved.

fc1's kernel is on 'data' along the dimension its matmul contracts, and its Adam moments are replicated
(the step returns all three on P('data', 'model')). Moving the kernel without its moments is another
program than moving it with them; the kernel's SL101 said no change helps while its SL201 offered
P('data', 'model'), and suggest's single move printed the kernel-alone figure for it.
"""

import json
import os

import jax
import pytest
from hlo_oracle import step_traffic, xla_peak
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "nnx_adam_step.py")
KERNEL = "['fc1']['kernel'].value"
EMBEDDING = "['emb']['embedding'].value"


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


@pytest.fixture(scope="module")
def module():
    return script_module(SCRIPT, "_nnx_adam_step")


def _with_moments(key: str, spec) -> dict:
    return {f"state{key}": spec, f"opt_state[0].mu{key}": spec, f"opt_state[0].nu{key}": spec}


_COMPILED: dict = {}


def _compiled(module, layout="written", moved=None):
    """The step as jax.jit compiles it here, and its arguments; ``moved`` values on their new layouts and
    returned there. Compiled once per program for this module's tests (the written step and the kernel moved
    with its moments are the oracle of two tests each)."""
    key = (layout, tuple(sorted((path, str(spec)) for path, spec in (moved or {}).items())))
    if key not in _COMPILED:
        fn, args = module.jitted(layout, moved, returned=bool(moved))
        _COMPILED[key] = fn.lower(*args).compile(), args
    return _COMPILED[key]


def _xla(module, layout="written", moved=None):
    """(peak, traffic) of the step compiled here; ``moved`` values on their new layouts and returned there."""
    compiled, args = _compiled(module, layout, moved)
    return xla_peak(compiled), step_traffic(compiled, args[:2])


_RUN: dict = {}


def _run(cli, *args):
    """The command's one target, run once per command (and fix checks on or off) for this module's tests: the
    lint as written is read by three of them."""
    key = (args, os.environ.get("JAX_SHARD_LINT_NO_FIX_CHECK"))
    if key not in _RUN:
        result = cli(*args, "--format", "json")
        assert result.code == 0, result.err
        _RUN[key] = json.loads(result.out)["targets"][0]
    return _RUN[key]


def test_lint_gives_the_kernel_one_recommendation_moved_with_its_moments(cli, checking, module):
    lint = _run(cli, "lint", SCRIPT, "--fail-on", "never")
    sl101 = next(f for f in lint["findings"] if f["rule"] == "SL101" and f["parameter"] == "state" + KERNEL)
    sl201 = next(f for f in lint["findings"] if f["rule"] == "SL201" and f["parameter"] == "state" + KERNEL)
    moved = _with_moments(KERNEL, P("data", "model"))
    written, fixed = _xla(module), _xla(module, moved=moved)
    alone = _xla(module, moved={"state" + KERNEL: P("data", "model")})
    assert fixed[0] < written[0] and fixed != alone  # the moments moving with the kernel is what helps
    # SL101's fix is the layout SL201 gives the same value, moved with its moments, checked as XLA compiles it.
    assert sl101["suggested_sharding"] == [["data"], ["model"]]
    # One SL201 for the kernel and its moments (one cause: they come back on one layout), naming all three.
    assert sl201["ops"] == [f"result[0]{KERNEL}", f"result[1][0].mu{KERNEL}", f"result[1][0].nu{KERNEL}"]
    assert not [f for f in lint["findings"] if f["rule"] == "SL201" and f is not sl201 and KERNEL in f["message"]]
    assert (f"shard state{KERNEL}, opt_state[0].mu{KERNEL} and opt_state[0].nu{KERNEL} as P('data', 'model')"
            in sl201["fix"])
    check = sl101["fix_check"]
    assert check["verdict"] == "better" and "checked:" in sl101["fix"]
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == fixed
    for path in moved:
        assert path in sl101["fix"] and path in check["change"]


@pytest.mark.slow
def test_suggest_single_move_is_the_kernel_with_its_moments_as_xla_compiles_it(cli, checking, module):
    suggest = _run(cli, "suggest", SCRIPT)
    move = next(v for v in suggest["versions"] if v["name"] == "single move")
    assert move["description"].startswith(f"state{KERNEL}: P('data') -> P('data', 'model'), its optimizer state")
    # suggest's every version returns each state value as it takes it (issue #46): lint's fix check leaves the
    # values it does not move to the compiler, which returns the other moments on another layout.
    args = module.arguments("written", _with_moments(KERNEL, P("data", "model")))
    taken = jax.tree.map(lambda a: a.sharding, args[:2])
    compiled = jax.jit(module.step, donate_argnums=(3,), out_shardings=(*taken, None)).lower(*args).compile()
    assert (move["peak_bytes"], move["traffic_bytes"]) == (xla_peak(compiled), step_traffic(compiled, args[:2]))


def test_a_fix_names_the_moments_its_check_moved(cli, checking, module):
    lint = _run(cli, "lint", SCRIPT, "--set", "layout=suggested", "--fail-on", "never")
    [f] = [f for f in lint["findings"] if f["rule"] == "SL101"]
    spec = P(None, ("data", "model"))
    moved = _with_moments(EMBEDDING, spec)
    written = _xla(module, "suggested")
    fixed = _xla(module, "suggested", moved)
    alone = _xla(module, "suggested", {"state" + EMBEDDING: spec})
    check = f["fix_check"]
    assert check["verdict"] == "better" and fixed[0] < written[0]
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == written
    # The check compiled the embedding with its moments, which is not the embedding alone: the text names all.
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == fixed != alone
    for path in moved:
        assert path in f["fix"] and path in check["change"]


def test_each_parameters_moments_are_one_sl201_without_a_shared_why(cli, module):
    """emb's and fc2's moments (their parameters come back as written, so have no SL201 of their own) are one
    finding each, as fc1's are; each names outputs XLA's compile returns on another sharding than their input's.
    A collective every SL201's output depends on (the gradient's) is not repeated as a why line on each."""
    lint = _run(cli, "lint", SCRIPT, "--fail-on", "never")
    sl201 = [f for f in lint["findings"] if f["rule"] == "SL201"]
    compiled, args = _compiled(module)
    moments = {f"[0].{m}{key}" for m in ("mu", "nu") for key in (EMBEDDING, KERNEL, "['fc2']['kernel'].value")}
    flat = jax.tree_util.tree_flatten_with_path(args[1])[0]
    outs = jax.tree.leaves(compiled.output_shardings[1])
    moved = {jax.tree_util.keystr(p) for (p, x), out in zip(flat, outs)
             if not out.is_equivalent_to(x.sharding, len(x.shape))}
    assert moments <= moved
    for key in (EMBEDDING, "['fc2']['kernel'].value"):
        [f] = [f for f in sl201 if f["parameter"] == f"opt_state[0].mu{key}"]
        assert f["ops"] == [f"result[1][0].mu{key}", f"result[1][0].nu{key}"] and f["count"] == 2
    # fc1's kernel comes back on its moments' layout too: one finding for the three (the kernel stands for them).
    [f] = [f for f in sl201 if KERNEL in f["message"]]
    assert f["parameter"] == f"state{KERNEL}" and f["count"] == 3
    assert f["ops"] == [f"result[0]{KERNEL}", f"result[1][0].mu{KERNEL}", f"result[1][0].nu{KERNEL}"]
    outs0 = jax.tree.leaves(compiled.output_shardings[0])
    flat0 = jax.tree_util.tree_flatten_with_path(args[0])[0]
    assert KERNEL in {jax.tree_util.keystr(p) for (p, x), out in zip(flat0, outs0)
                      if not out.is_equivalent_to(x.sharding, len(x.shape))}
    shared = set.intersection(*(set(f["provenance"]) for f in sl201))
    assert not any(line.startswith("it depends on") for line in shared)


def test_the_kernel_and_moments_sl201_gives_the_groups_total_and_what_it_is_made_of(cli, module):
    """The merged SL201 of fc1's kernel and its two Adam moments gave the kernel's bytes only. Its figures are
    the three outputs XLA returns on another layout than their inputs: each one's per-device bytes from its
    compiled output sharding's shard shape (the next step reshards them on entry), their global bytes from
    the arguments' shapes, both computed here."""
    import numpy as np

    lint = _run(cli, "lint", SCRIPT, "--fail-on", "never")
    [f] = [f for f in lint["findings"] if f["rule"] == "SL201" and KERNEL in f["message"]]
    compiled, args = _compiled(module)  # the step as written: module.jitted()'s

    def per_device(tree_index, key):
        flat = jax.tree_util.tree_flatten_with_path(args[tree_index])[0]
        outs = jax.tree.leaves(compiled.output_shardings[tree_index])
        [(x, out)] = [(x, out) for (p, x), out in zip(flat, outs) if jax.tree_util.keystr(p) == key]
        assert not out.is_equivalent_to(x.sharding, len(x.shape))  # it comes back on another layout
        return int(np.prod(out.shard_shape(x.shape))) * x.dtype.itemsize, int(np.prod(x.shape)) * x.dtype.itemsize

    kernel = per_device(0, KERNEL)
    moments = [per_device(1, f"[0].{m}{KERNEL}") for m in ("mu", "nu")]
    total = kernel[0] + sum(b for b, _ in moments)
    assert f["bytes"] == total and f["count"] == 3
    mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
    together = (f"together {mib(total)} per device ({mib(kernel[1] + sum(g for _, g in moments))} global): "
                f"state{KERNEL}'s {mib(kernel[0])} and its optimizer state's {mib(sum(b for b, _ in moments))} "
                f"(2 values of {mib(moments[0][0])} each)")
    assert together in f["message"], f["message"]
