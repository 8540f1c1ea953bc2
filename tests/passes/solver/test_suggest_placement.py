"""``suggest``'s pasted text where the inputs are placed rather than given to jit: Explicit mesh axes
(the placement types the inputs) and typed PRNG keys in the state (a leaf one dimension short of the
module's argument). Split from test_suggest.py at 400 lines."""

import json

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _suggest(cli, *args):
    result = cli("suggest", *args, "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    return json.loads(result.out)["targets"]


EXPLICIT_STEP = '''import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def train_step(params, x, y):
    def loss(p):
        return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda w, g: w - 1e-3 * g, params, grads)


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), devices=mesh_devices)  # Explicit axes, the default
    with jax.set_mesh(mesh):
        typed = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=spec)
        params = {"w1": typed((64, 256), P()), "w2": typed((256, 64), P())}
        return {"train_step": jax.jit(train_step).lower(params, typed((32, 64), P("data")),
                                                        typed((32, 64), P("data")))}
'''


def test_explicit_axes_get_a_placement_that_types_the_inputs(cli, tmp_path):
    """On Explicit axes jit refuses in_shardings its inputs do not have: the text places the inputs
    (jax.device_put), and their types then carry the suggested shardings, leaf by leaf."""
    script = tmp_path / "explicit_step.py"
    script.write_text(EXPLICIT_STEP)
    [r] = _suggest(cli, str(script))
    assert r["placement_text"].startswith("params, x, y = jax.device_put((params, x, y), (")
    namespace = {}
    exec(EXPLICIT_STEP, namespace)
    mesh = jax.make_mesh((4, 2), ("data", "model"), devices=jax.devices()[:8])
    with jax.set_mesh(mesh):
        params = {"w1": jnp.ones((64, 256)), "w2": jnp.ones((256, 64))}
        x, y = jnp.ones((32, 64)), jnp.ones((32, 64))
        scope = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, "params": params, "x": x, "y": y}
        exec(r["placement_text"], scope)
        leaves = jax.tree.leaves((scope["params"], scope["x"], scope["y"]))
        for leaf, a in zip(leaves, r["arguments"]):
            want = NamedSharding(mesh, P(*[tuple(x) if x else None for x in a["suggested"]]))
            assert jax.typeof(leaf).sharding.spec == want.spec or leaf.sharding.is_equivalent_to(want, leaf.ndim)
        out_shardings = eval(r["out_shardings_text"].removeprefix("out_shardings="), scope)
        stepped = jax.jit(namespace["train_step"], out_shardings=out_shardings)(
            scope["params"], scope["x"], scope["y"])  # the placed inputs run the step as they are
        assert jax.tree.structure(stepped) == jax.tree.structure(params)


KEYED_STEP = '''
import jax
import jax.numpy as jnp
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def train_step(state, x):
    noise = jax.random.normal(state["key"][0], x.shape)
    w = state["w"] - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh((x + noise) @ w) ** 2))(state["w"])
    return {"w": w, "key": jax.vmap(lambda k: jax.random.split(k, 2)[0])(state["key"])}


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 8))  # key<fry>[8]: u32[8,2] in the module
    state = {"w": jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp"))),
             "key": jax.ShapeDtypeStruct(keys.shape, keys.dtype, sharding=NamedSharding(mesh, P()))}
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
    return {"train_step": jax.jit(train_step).lower(state, x)}
'''


def test_typed_prng_keys_in_the_state_paste(cli, tmp_path):
    """nnx.Rngs keys in a train state (MaxText's): a typed key key<fry>[8] is u32[8,2] in the module, one
    dimension more than the leaf; binding the leaf to the module argument's rank-2 sharding raised
    ValueError (exit 3). The text checks, and pastes into jax.jit."""
    script = tmp_path / "keyed_step.py"
    script.write_text(KEYED_STEP)
    [r] = _suggest(cli, str(script))
    assert r["text_problem"] is None, r["text_problem"]
    key = [a for a in r["arguments"] if "key" in a["path"]]
    assert key and len(key[0]["shape"]) == 2  # the module's u32[8,2]
