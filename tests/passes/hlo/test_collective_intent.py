"""Collectives classified by intent, and rules that warn on the unintended only.
Shapes are checked against the arguments' own (global shape and PartitionSpec)."""

import os

from conftest import EXAMPLES, FIXTURES, lint_targets
from scripts import script_module


def targets(cli, path, *args):
    return {t["name"]: t for t in lint_targets(cli, path, *args)}


def test_fsdp_gathers_are_parameter_gathers(cli):
    t = targets(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))["train_step"]
    gathers = [c for c in t["collectives"] if c["intent"] == "parameter-gather"]
    # params['layers']['up'] is f32[8,1024,4096] on P(None, 'fsdp', 'tp'): one layer with fsdp gathered
    # is [1024, 4096 / 2]; ['down'] f32[8,4096,1024] on P(None, 'tp', 'fsdp') gives [2048, 1024].
    shapes = {tuple(c["shape"]) for c in gathers}
    assert {(1024, 2048), (2048, 1024)} <= shapes
    assert all(c["kind"] == "all-gather" and c["mesh_axes"] == ["fsdp"] for c in gathers)
    assert {c["intent"] for c in t["collectives"]} <= {"parameter-gather", "gradient-reduction", "activation",
                                                        "reshard"}
    # No rule warns about intended traffic.
    intended = {c["hlo_name"] for c in t["collectives"] if c["intent"] != "reshard"}
    assert not [f for f in t["findings"] if f["rule"] in ("SL101", "SL102") and f["subject"] in intended]


def test_a_replicated_embeddings_gradient_reduced_in_its_returned_layout_is_a_gradient_reduction(cli):
    """fsdp_tp_train_step's embedding is P() but XLA returns it P(None, 'tp') (its compiled output
    sharding, read here): the logits' backward dot makes its gradient as tp's half and XLA sums it over
    fsdp, the batch axis (the all-reduce whose op_name is the logits' transpose(jvp(...)), from XLA's text;
    its first result is the embedding's shape with one dimension cut by tp). Data-parallel gradient
    traffic: a gradient-reduction, not a forward matmul's partial sums (activation)."""
    import re

    from hlo_oracle import array_bytes, collectives_per_step

    lowered = script_module(os.path.join(EXAMPLES, "fsdp_tp_train_step.py")).shard_lint_targets()["train_step"]
    compiled = lowered.compile()
    embed = lowered.args_info[0][0]["embed"]
    mesh = compiled.output_shardings[0]["embed"].mesh
    assert tuple(compiled.output_shardings[0]["embed"].spec) in ((None, "tp"), (None, ("tp",)))
    text = compiled.as_text()
    [(name, shape)] = re.findall(r"^\s*%([\w.\-]+) = \((f32\[[\d,]+\])[^\n]* all-reduce\([^\n]*"
                                 r"op_name=\"[^\"]*transpose\(jvp\(bsd,vd->bsv\)\)", text, re.M)
    kind, nbytes, group, runs = collectives_per_step(text, 8)[name]
    assert (kind, group, runs) == ("all-reduce", mesh.shape["fsdp"], 1)
    assert array_bytes(shape) * mesh.shape["tp"] == embed.shape[0] * embed.shape[1] * 4

    t = targets(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))["train_step"]
    [c] = [c for c in t["collectives"] if c["hlo_name"] == name]
    assert (c["bytes"], c["mesh_axes"], c["intent"]) == (nbytes, ["fsdp"], "gradient-reduction")


def test_interpolation_gather_is_resharding_and_warned(cli):
    t = targets(cli, os.path.join(FIXTURES, "scripts", "sl101_relative_to_peak.py"))["sharded_on_wealth"]
    [c] = t["collectives"]
    assert c["intent"] == "reshard" and c["kind"] == "all-reduce" and c["shape"] == [8, 64, 512, 64]
    assert [f["rule"] for f in t["findings"] if f["subject"] == c["hlo_name"]] == ["SL101"]


EVAL_AND_TRAIN = '''import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("fsdp",), devices=mesh_devices, axis_types=(jax.sharding.AxisType.Auto,))
    w = jax.ShapeDtypeStruct((128, 128), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32, sharding=NamedSharding(mesh, P(None, "fsdp")))

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    def evaluate(w, x):
        return jnp.tanh(x @ w)

    def train(w, x):
        return w - 0.1 * jax.grad(loss)(w, x)

    return {"evaluate": jax.jit(evaluate).lower(w, x), "train": jax.jit(train).lower(w, x)}
'''


def test_an_evaluation_step_has_no_gradient_reductions(cli, tmp_path):
    """The product contracts the sharded dimension: its partial sums are all-reduced to f32[128, 128], the
    weight's own shape. It was labelled gradient-reduction by that shape alone; a gradient is reduced in
    the backward pass, and an evaluation step has none."""
    script = tmp_path / "eval_and_train.py"
    script.write_text(EVAL_AND_TRAIN)
    t = targets(cli, str(script))
    evaluate = [c for c in t["evaluate"]["collectives"] if c["kind"] in ("all-reduce", "reduce-scatter")]
    assert evaluate and {c["intent"] for c in evaluate} == {"activation"}
    # In the training step the reduction of that shape is the forward's partial sum too (its op_name is
    # jvp's dot_general, not transpose's): the weight's gradient x.T @ g comes out sharded like the weight.
    train = t["train"]["collectives"]
    assert train and all(c["intent"] == "activation" and "transpose(" not in c["op_name"] for c in train)


def test_stacked_layers_with_the_layer_axis_second_are_fsdp_traffic(cli):
    """MaxText stores a scanned stack as (embed, layers, mlp): one layer of a weight is the stack without its
    second dimension. Each layer's gather and its gradient's reduction were labelled reshard (one layer was
    taken to be the stack without its first dimension), and SL102 warned on intended FSDP traffic."""
    path = os.path.join(EXAMPLES, "maxtext_like_step.py")
    t = targets(cli, path, "--set", "layers=2", "--set", "d_model=256", "--set", "d_ff=512", "--set", "seq=256",
                "--set", "vocab=1024")["train_step"]
    # One layer of each decoder weight, from the argument's global shape with its fsdp dimension gathered.
    layers = {(a, b) for i in t["inputs"] if i["path"].startswith("params['decoder']")
              for a, _, b in [i["shape"]]}
    in_loop = [c for c in t["collectives"] if c["count"] == 2]  # inside the 2-layer scan
    gathers = [c for c in in_loop if c["kind"] == "all-gather" and tuple(d for d in c["shape"] if d != 1) in layers]
    reductions = [c for c in in_loop if c["kind"] in ("all-reduce", "reduce-scatter")
                  and tuple(d for d in c["shape"] if d != 1) in layers]
    assert gathers and reductions
    assert {c["intent"] for c in gathers} == {"parameter-gather"}
    assert {c["intent"] for c in reductions} == {"gradient-reduction"}
    assert not [f for f in t["findings"] if f["rule"] == "SL102"]


CONTRACTED_WEIGHT_MLP = '''import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def step(params, x, y):
    g = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, g)


def arguments():
    m = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    s = lambda shape, spec: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(m, spec))
    params = {"w1": s((4096, 16384), P("model", None)), "w2": s((16384, 4096), P("model", None))}
    return params, s((8192, 4096), P("data", None)), s((8192, 4096), P("data", None))


def shard_lint_targets():
    return {"step": jax.jit(step, donate_argnums=(0,)).lower(*arguments())}
'''


def test_gradient_of_a_weight_sharded_on_its_contracted_dimension_is_a_gradient_reduction(cli, tmp_path):
    """w1 P('model', None) is contracted by x @ w1: XLA makes its gradient transposed, (16384, 2048),
    sums it over data and slices it back. That all-reduce (found in XLA's own compiled text, compiled
    here) is the weight's gradient-reduction, not an activation."""
    import re

    import jax

    script = tmp_path / "contracted_weight_mlp.py"
    script.write_text(CONTRACTED_WEIGHT_MLP)
    module = script_module(str(script))
    text = jax.jit(module.step, donate_argnums=(0,)).lower(*module.arguments()).compile().as_text()
    results = re.findall(r"= (\(.*?\)|f32\[[\d,]+\]\S*) all-reduce\(", text)  # a combined one is a tuple
    xla = {tuple(int(d) for d in dims.split(",")) for r in results for dims in re.findall(r"f32\[([\d,]+)\]", r)}
    assert (16384, 2048) in xla  # the oracle: w1's gradient, transposed, per model shard

    [t] = lint_targets(cli, str(script))
    [grad] = [c for c in t["collectives"] if c["kind"] == "all-reduce" and tuple(c["shape"]) == (16384, 2048)]
    assert grad["intent"] == "gradient-reduction" and grad["mesh_axes"] == ["data"]


def test_megatron_partial_sums_in_a_layer_scan_are_activation_and_name_their_weight(cli):
    """remat_layer_stack: weights['up'] P(None, None, 'model') (column-parallel) and weights['down']
    P(None, 'model', None) (row-parallel), Megatron's pair, in a layer scan. XLA sums each block's partial
    products over model (the forward's by down, the backward's input gradient through up), behind a fusion
    that only converts the dot's result (CPU rounds it through bf16): they were labelled reshard and SL101
    warned on them, naming no weight. The oracle is XLA's compiled text, compiled here: the all-reduces
    over the model pairs (replica groups [4,2]<=[8]) that the dot_general's metadata names, each of the
    activation's per-device shape, inside the scan; the report labels each activation and no finding
    stands for one."""
    import importlib.util
    import re
    import sys

    sets = {"batch": 8, "seq": 256, "d_model": 256, "d_ff": 1024, "layers": 2}
    path = os.path.join(EXAMPLES, "remat_layer_stack.py")
    [t] = lint_targets(cli, path, *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")])
    spec = importlib.util.spec_from_file_location("_remat_layer_stack", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, EXAMPLES)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    text = module.shard_lint_targets(**sets)["train_step"].compile().as_text()
    activation = f"f32[{sets['batch'] // 4},{sets['seq']},{sets['d_model']}]"
    sums = set(re.findall(rf"%(all-reduce[\w.]*) = {re.escape(activation)}\S* all-reduce\(.*replica_groups=\[4,2\]"
                          r"<=\[8\].*op_name=\"[^\"]*while/body/[^\"]*dot_general\"", text))
    assert len(sums) == 2  # the forward's and the backward's, once each per layer
    by_name = {c["hlo_name"]: c for c in t["collectives"]}
    assert {by_name[n]["intent"] for n in sums} == {"activation"}
    assert {by_name[n]["count"] for n in sums} == {sets["layers"]}
    assert not [f for f in t["findings"] if f["subject"] in sums or sums & set(f["ops"])]
