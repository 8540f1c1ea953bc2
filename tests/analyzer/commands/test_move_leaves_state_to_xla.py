"""A move's printed out_shardings are the ones it was compiled with (issue 46, newbie15's F3): the state the
written step already returns on another layout than it takes it (SL201's) is left to XLA by the move's check,
and the fix text now names it ("leaving the output of params['b'] to XLA (None ...)") instead of saying only
"return ... the other state outputs each on its input's layout", which a user pasting every state output pinned
compiled to other figures (a jraph GNN: +575 KiB of collectives where lint printed the checked +512 KiB).
The oracle is XLA: the program edited as the text says, compiled by JAX, its ``memory_analysis()`` and the
collectives of its compiled text, and the program a user pinning everything would write, which differs."""

import json

import jax
import pytest
from hlo_oracle import step_traffic, xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

# x @ w1 + b with w1 on the dimension it contracts: XLA returns the replicated bias on 'model' (its gradient is
# reduced there), so b's output is SL201's and the move of w1 leaves it to XLA.
SOURCE = '''
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def mesh():
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def spec(m, shape, pspec):
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(m, pspec))


def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def step(params, x, y):
    g = jax.grad(loss)(params, x, y)
    return (jax.tree.map(lambda p, g: p - 0.01 * g, params, g),)


def arguments(w1_spec):
    m = mesh()
    params = {"b": spec(m, (2048,), P()), "w1": spec(m, (512, 2048), w1_spec),
              "w2": spec(m, (2048, 512), P("model", None))}
    return params, spec(m, (1024, 512), P("data", None)), spec(m, (1024, 512), P("data", None))


def shard_lint_targets():
    return {"contracted": jax.jit(step).lower(*arguments(P("model", None)))}
'''


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def test_a_move_names_the_state_output_it_leaves_to_xla_and_prints_that_programs_figures(cli, checking, tmp_path):
    script = tmp_path / "bias_returned_moved.py"
    script.write_text(SOURCE)
    module = script_module(str(script))
    written = module.arguments(P("model", None))
    # The premise, from XLA: the step as written returns b on another layout than it takes it, w1 and w2 as taken.
    as_written = jax.jit(module.step).lower(*written).compile()
    back = jax.tree.leaves(as_written.output_shardings)
    assert [o.is_equivalent_to(x.sharding, len(x.shape)) for x, o in zip(jax.tree.leaves(written[0]), back)] \
        == [False, True, True]

    # The SL105 reshards are 4 MiB per device: under its default minimum.
    result = cli("lint", str(script), "--fail-on", "never", "--format", "json",
                 "--threshold", "unexplained-reshard-bytes=0")
    assert result.code == 0, result.err
    [f] = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL105"]
    assert f["fix"].startswith(
        "shard params['w1'] as P(None, 'model') instead of P('model'), and return it in that layout, leaving the "
        "output of params['b'] to XLA (None: the step as written returns it on another layout than its input's) "
        "(out_shardings=) (checked:"), f["fix"]
    check = f["fix_check"]

    # The program as the text says: w1 on P(None, 'model') and returned so, w2 and b None (w2 comes back as taken
    # unpinned: its pin changes nothing and is not asked for, polish18's F5).
    mesh = module.mesh()
    moved = module.arguments(P(None, "model"))
    pinned = {"b": None, "w1": NamedSharding(mesh, P(None, "model")), "w2": None}
    pasted = jax.jit(module.step, out_shardings=(pinned,)).lower(*moved).compile()
    w2 = jax.tree.leaves(pasted.output_shardings)[2]
    assert w2.is_equivalent_to(moved[0]["w2"].sharding, 2)
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == (xla_peak(pasted),
                                                                          step_traffic(pasted, moved[:1]))
    # What a user pinning every state output (b on P() too) compiles is another program, with other figures.
    every = jax.jit(module.step, out_shardings=({**pinned, "b": NamedSharding(mesh, P())},)).lower(*moved).compile()
    assert (xla_peak(every), step_traffic(every, moved[:1])) != (xla_peak(pasted), step_traffic(pasted, moved[:1]))


def test_suggests_move_prints_lints_check_of_it_and_says_what_differs(cli, checking, tmp_path):
    """suggest's single move pins every state output (a version it prints returns its state as taken), where lint's
    check of the same move leaves b to XLA: its "(as lint checks it: ...)" figure is lint's check, the program
    lint compiles (newbie15's GNN: +575 KiB printed there against lint's +512 KiB), and the text says the
    difference. Only w1 free to move (with every other argument fixed), on 'model'."""
    script = tmp_path / "bias_returned_moved.py"
    script.write_text(SOURCE)
    lint = cli("lint", str(script), "--fail-on", "never", "--format", "json", "--threshold",
               "unexplained-reshard-bytes=0")
    assert lint.code == 0, lint.err
    [f] = [f for f in json.loads(lint.out)["targets"][0]["findings"] if f["rule"] == "SL105"]
    kept = [a for path in ("x", "y", "params['w2']", "params['b']") for a in ("--fix", path)]
    result = cli("suggest", str(script), "--axes", "model", *kept, "--format", "json")
    assert result.code == 0, result.err
    [move] = [v for v in json.loads(result.out)["targets"][0]["versions"] if v["name"] == "single move"]
    assert move["description"].startswith("params['w1']: P('model') -> P(None, 'model'), returned in that layout "
                                          "(as lint checks it, with the 1 state output the step as written returns "
                                          "on another layout than it takes left to XLA, which this version pins: "), \
        move["description"]
    # The figure is lint's check of the move, word for word, and XLA's of the program it names (b left to XLA).
    cost = move["description"].split("which this version pins: ", 1)[1][:-1]
    assert f"(checked: {cost})" in f["fix"], (cost, f["fix"])
    module = script_module(str(script))
    mesh = module.mesh()
    moved = module.arguments(P(None, "model"))
    pinned = {"b": None, "w1": NamedSharding(mesh, P(None, "model")), "w2": NamedSharding(mesh, P("model", None))}
    linted = jax.jit(module.step, out_shardings=(pinned,)).lower(*moved).compile()
    assert (f["fix_check"]["peak_bytes_after"], f["fix_check"]["traffic_bytes_after"]) == (
        xla_peak(linted), step_traffic(linted, moved[:1]))
    # The version's own figures are XLA's of the program it prints, b pinned too: another program.
    every = jax.jit(module.step, out_shardings=({**pinned, "b": NamedSharding(mesh, P())},)).lower(*moved).compile()
    assert (move["peak_bytes"], move["traffic_bytes"]) == (xla_peak(every), step_traffic(every, moved[:1]))
    assert (move["peak_bytes"], move["traffic_bytes"]) != (f["fix_check"]["peak_bytes_after"],
                                                          f["fix_check"]["traffic_bytes_after"])
