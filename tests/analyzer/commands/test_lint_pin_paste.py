"""lint's printed out_shardings (SL201's "the target's suggested out_shardings="), pasted into the script,
puts every output on the sharding lint promised, on abstract inputs that carry no sharding
(``jax.eval_shape``'s, a ShapeDtypeStruct given none; jit's in_shardings place them): there ``x.sharding`` of an
input is None, and the ``jax.tree.map(lambda x: x.sharding, state)`` lint printed before pinned nothing (issue
46). check on the snapshot prints the same text. The oracle is XLA: the pasted text in ``jax.jit(...,
out_shardings=...)``, compiled by JAX, and its ``output_shardings``."""

import json
import os

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

# The state is a dict of parameters and an optax-like moments NamedTuple (an attribute container: its text is a
# table over the input's key paths); each comes back transposed-and-multiplied, on another layout than it went in.
ABSTRACT = '''import typing

import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


class Moments(typing.NamedTuple):
    mu: dict
    nu: dict


def step(params, opt_state, batch):
    mu = {"w": opt_state.mu["w"].T @ opt_state.mu["w"]}
    nu = {"w": opt_state.nu["w"] + batch.sum()}
    return {"w": params["w"].T @ params["w"], "b": params["b"] + batch.sum(0)}, Moments(mu, nu), batch.sum()


def inputs(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    params = jax.eval_shape(lambda: {"w": jnp.zeros((512, 512)), "b": jnp.zeros((512,))})
    opt_state = Moments(*jax.eval_shape(lambda: ({"w": jnp.zeros((512, 512))}, {"w": jnp.zeros((512, 512))})))
    batch = jax.ShapeDtypeStruct((128, 512), jnp.float32)
    w = NamedSharding(mesh, P("data", "model"))
    in_shardings = ({"w": w, "b": NamedSharding(mesh, P("model"))}, Moments({"w": w}, {"w": w}),
                    NamedSharding(mesh, P("data")))
    return mesh, params, opt_state, batch, in_shardings


def shard_lint_targets(mesh_devices=None):
    _, params, opt_state, batch, in_shardings = inputs(mesh_devices)
    return {"step": jax.jit(step, in_shardings=in_shardings, donate_argnums=(0, 1)).lower(params, opt_state, batch)}
'''


def _lint(cli, script) -> dict:
    result = cli("lint", str(script), "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    return t


def _spec(sharding) -> P:
    return P(*[tuple(d) if d else None for d in sharding or []])


def test_pasted_lint_pinning_puts_abstract_inputs_state_on_its_input_layout(cli, tmp_path):
    script = tmp_path / "abstract_adam_state.py"
    script.write_text(ABSTRACT)
    t = _lint(cli, script)
    assert any(f["rule"] == "SL201" for f in t["findings"]), t["findings"]
    text = t["suggested_out_shardings"]
    assert text and "x.sharding" not in text, text
    assert "tree_map_with_path" in text  # the NamedTuple of moments: a table over opt_state's key paths

    module = script_module(str(script))
    mesh, params, opt_state, batch, in_shardings = module.inputs()
    assert all(x.sharding is None for x in jax.tree.leaves((params, opt_state)))  # nothing to read
    pasted = eval(text.removeprefix("out_shardings="),  # the user's names, as the text is pasted into the script
                  {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh,
                   "params": params, "opt_state": opt_state, "batch": batch})
    written = jax.jit(module.step, in_shardings=in_shardings, donate_argnums=(0, 1)
                      ).lower(params, opt_state, batch).compile()
    fixed = jax.jit(module.step, in_shardings=in_shardings, out_shardings=pasted, donate_argnums=(0, 1)
                    ).lower(params, opt_state, batch).compile()

    # The premise, from XLA: as written, state comes back on another layout than it went in.
    state_in = jax.tree.leaves(in_shardings[:2])
    ranks = [len(x.shape) for x in jax.tree.leaves((params, opt_state))]
    assert any(not o.is_equivalent_to(i, r)
               for o, i, r in zip(jax.tree.leaves(written.output_shardings[:2]), state_in, ranks))
    # Pasted: every output where lint promised it, XLA's compiled output shardings the oracle. The state's
    # promise is its input's layout; the loss keeps the layout it was compiled to.
    promised = [*state_in, NamedSharding(mesh, _spec(t["outputs"][-1]["sharding"]))]
    got = jax.tree.leaves(fixed.output_shardings)
    assert len(got) == len(promised) == len(t["outputs"]) == 5
    for g, want, o in zip(got, promised, t["outputs"]):
        assert g.is_equivalent_to(want, len(o["shape"])), (o["path"], g, want)


def test_check_prints_lints_pinning_text_word_for_word(cli, tmp_path):
    """On a program of dicts and tuples, check (which has the result paths only, no pytree) prints the text
    lint prints, and both spell every sharding."""
    script = os.path.join("fixtures", "scripts", "sl201_output_sharding_mismatch.py")
    linted = cli("lint", script, "--target", "unpinned", "--format", "json", "--fail-on", "never")
    assert linted.code == 0, linted.err
    snap = cli("snapshot", script, "--target", "unpinned", "-o", str(tmp_path / "snap"))
    assert snap.code == 0, snap.err
    checked = cli("check", str(tmp_path / "snap" / "unpinned.mlir"), "--format", "json", "--fail-on", "never")
    assert checked.code == 0, checked.err
    lint_text = json.loads(linted.out)["targets"][0]["suggested_out_shardings"]
    assert lint_text == json.loads(checked.out)["targets"][0]["suggested_out_shardings"]
    assert lint_text == "out_shardings=({'w': NamedSharding(mesh, P('data', 'model'))}, NamedSharding(mesh, P()))"
