"""The Python lint and suggest print for arguments that are Equinox modules holding custom pytree nodes (haliax's
NamedArray: an attribute path, then the node's one child, whose key is jax's FlattenedIndexKey) pastes and
compiles to the figures the tool printed (issue 46, newbie19 F1: "the in_shardings text did not check
(KeyError: '.embed.weight[<flat index 0>]')", no text at all). The table's keys are JAX's own ``keystr`` of the
argument's key paths. Oracle: the pasted text in ``jax.jit``, compiled by XLA, its ``memory_analysis()``.

And a ``(loss, grads)`` step (newbie19 F8): the gradients have the params' shapes and key paths under
``result[1]``, so SL201 pairs them with the params by path alone; its finding says the next step reshards them
only if they are fed back as the params, where a step that returns its state says so outright."""

import json

import jax
from ci_deps import require
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

require("equinox", "the arguments are Equinox modules", allow_module_level=True)

# A NamedArray in small: a custom node registered without keys (its child's key path is '[<flat index 0>]').
# Each parameter comes back transposed-and-multiplied, on another layout than it went in: SL201's round trip.
MODULE_STEP = '''import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


class Named:
    def __init__(self, array, axes):
        self.array, self.axes = array, axes


jax.tree_util.register_pytree_node(Named, lambda n: ((n.array,), n.axes), lambda axes, kids: Named(kids[0], axes))


class Block(eqx.Module):
    up: Named
    down: Named


def step(model, x):
    up = model.up.array.T @ model.up.array
    down = model.down.array @ model.down.array.T
    loss = ((x @ model.up.array) @ model.down.array).sum()
    return Block(Named(up, model.up.axes), Named(down, model.down.axes)), loss


def grad_step(model, x):
    loss_of = lambda m: ((x @ m.up.array) @ m.down.array).sum()
    return eqx.filter_value_and_grad(loss_of)(model)


def inputs(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    model = Block(Named(jax.ShapeDtypeStruct((256, 256), jnp.float32), ("embed", "mlp")),
                  Named(jax.ShapeDtypeStruct((256, 256), jnp.float32), ("mlp", "embed")))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    w = NamedSharding(mesh, P("data", "model"))
    in_shardings = (Block(Named(w, ("embed", "mlp")), Named(w, ("mlp", "embed"))), NamedSharding(mesh, P("data")))
    return mesh, model, x, in_shardings


def shard_lint_targets(mesh_devices=None):
    _, model, x, in_shardings = inputs(mesh_devices)
    return {"step": jax.jit(step, in_shardings=in_shardings).lower(model, x),
            "grad_step": jax.jit(grad_step, in_shardings=in_shardings).lower(model, x)}
'''


def _peak(compiled) -> int:
    m = compiled.memory_analysis()
    return (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
            - m.alias_size_in_bytes)


def _pasted(text: str, prefix: str, module, mesh, model, x):
    return eval(text.removeprefix(prefix),  # the user's names, as the text is pasted into the script
                {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, "model": model, "x": x})


def _script(tmp_path):
    script = tmp_path / "module_step.py"
    script.write_text(MODULE_STEP)
    return script, script_module(str(script))


def test_lints_out_shardings_for_a_module_of_custom_nodes_pastes_to_its_checked_peak(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)  # the fix's figures are what is compared
    script, module = _script(tmp_path)
    result = cli("lint", str(script), "--target", "step", "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    assert not any("did not check" in w for w in t["warnings"]), t["warnings"]
    text = t["suggested_out_shardings"]
    assert text and "tree_map_with_path" in text, (text, t["warnings"])
    [checked] = [f["fix_check"] for f in t["findings"] if f["rule"] == "SL201"]

    mesh, model, x, in_shardings = module.inputs()
    fixed = jax.jit(module.step, in_shardings=in_shardings,
                    out_shardings=_pasted(text, "out_shardings=", module, mesh, model, x)).lower(model, x).compile()
    assert _peak(fixed) == checked["peak_bytes_after"]
    for got, want in zip(jax.tree.leaves(fixed.output_shardings)[:2], jax.tree.leaves(in_shardings[0])):
        assert got.is_equivalent_to(want, 2), (got, want)


def test_suggests_in_and_out_shardings_for_a_module_of_custom_nodes_paste_to_its_peak(cli, tmp_path):
    script, module = _script(tmp_path)
    result = cli("suggest", str(script), "--target", "step", "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    assert t["in_shardings_text"] and t["out_shardings_text"], t["text_problem"]
    [chosen] = [v for v in t["versions"] if v["name"] == t["chosen"]]

    mesh, model, x, _ = module.inputs()  # abstract inputs with no sharding: the pasted in_shardings place them
    pasted_in = _pasted(t["in_shardings_text"], "in_shardings=", module, mesh, model, x)
    pasted_out = _pasted(t["out_shardings_text"], "out_shardings=", module, mesh, model, x)
    compiled = jax.jit(module.step, in_shardings=pasted_in, out_shardings=pasted_out).lower(model, x).compile()
    assert _peak(compiled) == chosen["peak_bytes"]


def test_gradients_returned_beside_the_loss_are_resharded_only_if_fed_back(cli, tmp_path):
    script, module = _script(tmp_path)
    result = cli("lint", str(script), "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    targets = {t["name"]: t for t in json.loads(result.out)["targets"]}
    # The premise, from XLA: the gradients come back on another layout than the params went in.
    mesh, model, x, in_shardings = module.inputs()
    compiled = jax.jit(module.grad_step, in_shardings=in_shardings).lower(model, x).compile()
    assert any(not g.is_equivalent_to(w, 2) for g, w in zip(jax.tree.leaves(compiled.output_shardings[1]),
                                                             jax.tree.leaves(in_shardings[0])))
    grads = [f for f in targets["grad_step"]["findings"] if f["rule"] == "SL201"]
    assert grads and all("if the caller feeds it back" in f["message"] for f in grads), grads
    # A step that returns its state updated (result[0] is argument 0) says the next step reshards it, outright.
    state = [f for f in targets["step"]["findings"] if f["rule"] == "SL201"]
    assert state and not any("feeds it back" in f["message"] for f in state), state
