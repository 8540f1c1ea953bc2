"""Findings on real model libraries point at the user's own lines, suppressions
work there, and the suggested out_shardings text pastes into ``jax.jit``.

The oracle for the paste is JAX itself: the text is evaluated with the script's
own abstract inputs, given to ``jax.jit`` with the script's real step function,
compiled, and XLA's output shardings compared with the inputs'.
"""

import importlib.util
import json
import os
import shutil
import sys

import jax
import pytest
from ci_deps import require
from conftest import EXAMPLES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

MODELS = os.path.join(EXAMPLES, "models")
SCRIPTS = {
    "optax_adamw_mlp": ("optax",),
    "equinox_mlp": ("equinox", "optax"),
    "nnx_transformer": ("flax", "optax"),
    "gpt2_flax": ("transformers", "flax", "optax"),
    "penzai_llama": ("penzai", "optax"),
    "flax_linen_logical": ("flax",),
}


def _needs(libs):
    for lib in libs:
        require(lib, f"{lib} is not installed (the [test] extra)")


def _lint(cli, script, *extra):
    result = cli("lint", script, "--format", "json", "-q", "--fail-on", "never", *extra)
    assert result.code == 0, result.err
    return json.loads(result.out)


def _import(path):
    name = "_paste_check_" + os.path.splitext(os.path.basename(path))[0]
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


@pytest.fixture(scope="module")
def reports():
    """The module's lint reports, by command: a command several tests read (each model's default lint, GPT-2's
    and penzai's other layouts) runs once for them."""
    return {}


def _linted(cli, reports, script, *extra):
    """``_lint(cli, script, *extra)``, run once per module."""
    key = (script, *extra)
    if key not in reports:
        reports[key] = _lint(cli, script, *extra)
    return reports[key]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_findings_name_the_users_lines(cli, reports, name):
    _needs(SCRIPTS[name])
    script = os.path.join(MODELS, f"{name}.py")
    report = _linted(cli, reports, script)
    findings = [f for t in report["targets"] for f in t["findings"] if f["severity"] in ("warning", "error")]
    assert findings
    for f in findings:
        assert f["source"] is not None, f
        assert f["source"]["file"].startswith("examples/models/"), f
    collectives = [c for t in report["targets"] for c in t["collectives"]]
    for c in collectives:
        assert c["source"] is None or c["source"]["file"].startswith("examples/models/"), c
        if c["via"] is not None:  # the library line the op went through, as its package path
            assert not c["via"]["file"].startswith(("examples/", "/")), c
    if name not in ("optax_adamw_mlp", "flax_linen_logical"):  # these compute in the user's own code
        assert any(c["via"] for c in collectives), "library frames are kept as via"


@pytest.mark.parametrize("name", ["equinox_mlp", "nnx_transformer", "gpt2_flax"])
def test_suggested_out_shardings_paste_into_jit(cli, reports, name):
    _needs(SCRIPTS[name])
    script = os.path.join(MODELS, f"{name}.py")
    report = _linted(cli, reports, script)
    text = report["targets"][0]["suggested_out_shardings"]
    assert text
    assert "x.sharding" not in text  # every sharding spelled: it holds on abstract inputs too
    module = _import(script)
    fn, options, args = module.step_and_inputs()
    import inspect

    params = list(inspect.signature(fn).parameters)
    static = set(options.get("static_argnums", ()) if isinstance(options.get("static_argnums", ()), tuple)
                 else (options["static_argnums"],))
    mesh = next(a.sharding.mesh for a in jax.tree.leaves(args[-1:]))
    namespace = {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh}
    namespace.update({params[i]: a for i, a in enumerate(args) if i not in static})
    out_shardings = eval(text.removeprefix("out_shardings="), namespace)
    compiled = jax.jit(fn, out_shardings=out_shardings, **options).lower(*args).compile()
    outputs = jax.tree.leaves(compiled.output_shardings)
    state = [a for i, a in enumerate(args) if i not in static][:-1]  # everything but the batch
    state_leaves = jax.tree.leaves(state)
    assert len(outputs) == len(state_leaves) + 1  # the state, then the loss
    for got, arg in zip(outputs, state_leaves):
        assert got.is_equivalent_to(arg.sharding, len(arg.shape)), (got, arg.sharding)


def test_suppression_on_the_users_line(cli, tmp_path):
    _needs(SCRIPTS["nnx_transformer"])
    for f in ("nnx_transformer.py", "mesh_util.py"):
        shutil.copy(os.path.join(MODELS, f), tmp_path / f)
    script = str(tmp_path / "nnx_transformer.py")
    # The tied embedding on the hidden dimension the logits projection contracts: SL103, whose innermost frame
    # is flax's Embed.attend. (The vocab-parallel lookup's all-reduce this test read before is the designed
    # reduction of that layout, reported by no rule since bert25.)
    strict = ("--set", "embed_on=d_model")
    report = _lint(cli, script, *strict)
    sl103 = [f for t in report["targets"] for f in t["findings"] if f["rule"] == "SL103"]
    assert sl103 and sl103[0]["via"]["file"].startswith("flax/")
    line = sl103[0]["source"]["line"]
    lines = open(script).read().splitlines()
    lines[line - 1] += "  # shard-lint: ignore[SL103]"
    open(script, "w").write("\n".join(lines) + "\n")
    after = _lint(cli, script, *strict)
    assert not [f for t in after["targets"] for f in t["findings"] if f["rule"] == "SL103"]
    assert after["targets"][0]["suppressed"] >= 1
    assert not [f for f in after["findings"] if f["rule"] == "SL001"]


def test_sarif_uris_are_relative_to_the_checkout(cli):
    _needs(SCRIPTS["equinox_mlp"])
    result = cli("lint", os.path.join(MODELS, "equinox_mlp.py"), "--format", "sarif", "-q", "--fail-on", "never")
    sarif = json.loads(result.out)
    results = sarif["runs"][0]["results"]
    assert results
    for r in results:
        artifact = r["locations"][0]["physicalLocation"]["artifactLocation"]
        assert artifact["uriBaseId"] == "%SRCROOT%"
        assert artifact["uri"].startswith("examples/models/"), artifact


NNX_LOOP = """
import jax, jax.numpy as jnp, optax
from flax import nnx


class M(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(64, 128, rngs=rngs)

    def __call__(self, x):
        return self.l1(x)


model = M(nnx.Rngs(0))
opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


@nnx.jit
def step(model, opt, x):
    loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
    opt.update(model, grads)
    return loss


for _ in range(2):
    step(model, opt, jnp.ones((8, 64)))
"""


def test_run_names_the_call_site_of_an_nnx_jit_step(cli, tmp_path):
    _needs(("flax", "optax"))
    script = tmp_path / "loop.py"
    script.write_text(NNX_LOOP)
    result = cli("run", str(script), "--devices", "8", "--all", "--only", "step", "--format", "json", "-q",
                 "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    report = json.loads(result.out)
    (target,) = [t for t in report["targets"] if t["name"] == "jit_step"]
    line = NNX_LOOP.splitlines().index("    step(model, opt, jnp.ones((8, 64)))") + 1
    assert target["call_site"]["line"] == line
    assert target["call_site"]["file"].endswith("loop.py")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_rewrite_does_not_blame_optimizer_state_for_a_gradient_reduction(cli, name):
    # Before: "still rebuilds the whole of opt_state[0].nu.embed.weight" for the embedding
    # gradient's all-reduce, which only shares that moment's shape. Adam's moments are
    # only ever updated elementwise: no collective reads one, so none may be blamed.
    _needs(SCRIPTS[name])
    result = cli("rewrite", os.path.join(MODELS, f"{name}.py"), "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    [t] = json.loads(result.out)["targets"]
    if name == "equinox_mlp":
        assert t["out_shardings"]  # its state outputs were pinned
    # A gather XLA inserts to return a moment on the layout rewrite pinned produces that output (fix22: "XLA
    # inserts it to return result[1][0].mu..."; now one paragraph for all of them, "inserted to meet the pinned
    # out_shardings"): it names the outputs it makes, not a moment it reads.
    assert not [line for line in t["remaining"] if ("opt_state" in line or ".nu" in line or ".mu" in line)
                and "XLA inserts it to return result" not in line
                and "inserted to meet the pinned out_shardings" not in line]
    named = {c["input_path"] for c in t["after"]["collectives"] if c["input_path"]}
    assert not [p for p in named if "opt_state" in p or ".nu" in p or ".mu" in p]
    intents = {c["intent"] for c in t["after"]["collectives"]}
    assert "gradient-reduction" in intents


@pytest.mark.parametrize("name,logits,weight", [
    ("gpt2_flax", "f32[4, 128, 8192]", "['wte']['embedding'] P(None, 'model')"),
    ("nnx_transformer", "f32[8, 128, 4096]", "['embed']['embedding'].value P(None, 'model')"),
])
def test_the_logits_all_reduce_of_a_d_model_sharded_embedding_is_raised(cli, reports, name, logits, weight):
    # The logits are the tied embedding contracted over d_model: sharded there, XLA
    # all-reduces the whole (batch/data, seq, vocab) logits. The shape comes from each
    # config (GPT-2: batch 16, vocab 8192; NNX: batch 32, vocab 4096; data=4, seq 128).
    _needs(SCRIPTS[name])
    script = os.path.join(MODELS, f"{name}.py")
    # GPT-2's default layout also shards c_attn and c_fc on their input features (dimension 1 of Flax's
    # Conv1D kernel, which the matmul contracts): 4 layers' 2 MiB sums, 4x their input, one SL103 of their
    # own since sums are counted per mistake. The logits finding is the one about the embedding.
    def embedding_sums(*args):
        return [f for t in _linted(cli, reports, script, *args)["targets"] for f in t["findings"]
                if f["rule"] == "SL103" and "embedding" in (f["parameter"] or "")]

    found = embedding_sums("--set", "embed_on=d_model")
    assert len(found) == 1, found
    f = found[0]
    assert logits in f["message"] and weight in f["message"], f["message"]
    assert f["source"]["file"] == f"examples/models/{name}.py" and f["via"]["file"].startswith("flax/")
    assert not embedding_sums()


def test_penzai_llama_sharded_on_its_embedding_axis_raises_the_logits_all_reduce(cli, reports):
    # penzai shards by axis name: {"embedding": "model"} puts every weight's embedding
    # axis on the model axis, so the lm_head (embedding, vocabulary) contracts a sharded
    # axis and XLA all-reduces the whole (batch/data, seq, vocabulary) logits: batch 16
    # over data=4, seq 128, vocabulary 8192. Its Megatron mapping (heads, neurons and
    # vocabulary on model) raises none, nor does the backward pass of either.
    _needs(SCRIPTS["penzai_llama"])
    script = os.path.join(MODELS, "penzai_llama.py")
    found = [f for t in _linted(cli, reports, script, "--set", "embed_on=embedding")["targets"] for f in t["findings"]
             if f["rule"] == "SL103"]
    # One cause: every weight sharded on the embedding axis it contracts; the lm_head's logits, the
    # largest, stand for it, and the finding names the other weights given the same change.
    logits = [f for f in found if "f32[4, 128, 8192]" in f["message"]]
    assert len(logits) == len(found) == 1, [f["message"] for f in found]
    assert "params[20].value.data_array P('model')" in logits[0]["message"]  # the lm_head, last parameter
    # The MLP gate and up projections' sums (2 MiB each, one 4 MiB combined all-reduce per layer) are named with
    # it: test_penzai_llamas_mlp_weights_are_named_with_the_lm_head below.
    named = logits[0]["parameters"] or [logits[0]["parameter"]]
    assert named[0] == "params[20].value.data_array", named
    # JAX's own abstract inputs: each named weight is sharded on 'model' along the dimension the fix frees.
    _, _, (params, _, _) = _import(script).step_and_inputs(embed_on="embedding")
    for path in named:
        spec = params[int(path[len("params["):path.index("]")])].value.data_array.sharding.spec
        assert tuple(spec)[:1] == ("model",), (path, spec)
        assert path in logits[0]["fix"]
    source = logits[0]["source"]
    assert (source["file"], source["line"]) == ("examples/models/penzai_llama.py", 31)  # logits = model(...)
    assert logits[0]["via"]["file"].startswith("penzai/")
    assert not [f for t in _linted(cli, reports, script)["targets"] for f in t["findings"] if f["rule"] == "SL103"]


def test_penzai_llamas_mlp_weights_are_named_with_the_lm_head(cli, reports):
    """The MLP's gate and up projections' sums (2 MiB each, one 4 MiB combined all-reduce per layer) are each
    under partial-sum-min-bytes alone: judged with every sum their one layout asks for, they are reported, and
    named with the lm_head, whose layout (P('model') on the dimension each contracts) is the same mistake."""
    _needs(SCRIPTS["penzai_llama"])
    script = os.path.join(MODELS, "penzai_llama.py")
    linted = _linted(cli, reports, script, "--set", "embed_on=embedding")
    [logits] = [f for t in linted["targets"] for f in t["findings"] if f["rule"] == "SL103"]
    named = logits["parameters"]
    assert named[0] == "params[20].value.data_array" and len(named) == len(set(named)) == logits["count"] > 1


def test_one_finding_per_cause_across_layers(cli):
    """GPT-2 layers whose c_proj shards its output features: each layer gathers its MLP activation (an
    all-gather per layer in XLA's compiled HLO, at the user's one model(...) line). The report has one SL101
    for them, counting one per layer, naming the weight across layers and the spec that multiplies the shards
    in place. Two layers are as many causes merged as six were (the layers are unrolled: each adds its trace
    and compile twice, lint's and the oracle's); the example's two are the program
    test_printed_fixes_measured.py lints (its features layout), whose compile lint reads from the run's
    compile memo."""
    _needs(SCRIPTS["gpt2_flax"])
    layers = 2
    script = os.path.join(MODELS, "gpt2_flax.py")
    report = _lint(cli, script, "--set", f"layers={layers}", "--set", "layout=features",
                   "--threshold", "replicating-collective-bytes=1MiB")
    [t] = report["targets"]
    warnings = [f for f in t["findings"] if f["severity"] == "warning"]
    # SL202's cause is the argument it names (its subject): params and opt_state are two, at one jit call.
    causes = [(f["rule"], str(f["source"]), str(f["via"]), f["parameter"] or (f["subject"] if f["rule"] == "SL202"
                                                                             else None)) for f in warnings]
    assert len(causes) == len(set(causes))
    assert len({c[:3] for c in causes if c[0] in ("SL101", "SL103")}) == len(
        [c for c in causes if c[0] in ("SL101", "SL103")])
    [f] = [f for f in warnings if f["rule"] == "SL101"]
    assert f["parameter"] == "params['transformer']['h'][*]['mlp']['c_proj']['kernel']"
    assert f["parameter_sharding"] == [["model"], []] and f["suggested_sharding"] == [[], ["model"]]
    assert f["parameter"] in f["message"] and "P(None, 'model')" in f["fix"]

    # XLA's own count: the all-gathers of the MLP activation, f32[batch/data, seq, 4*d_model] per device
    # (matched by shape: XLA 0.12 gives a collective its operand's metadata, not c_proj's).
    import re

    module = _import(script)
    compiled = module.shard_lint_targets(layers=layers, layout="features")["train_step"].compile()
    gathers = [ln for ln in compiled.as_text().splitlines() if re.search(r"= f32\[4,128,1024\]\S* all-gather\(", ln)]
    assert f["count"] == len(gathers) == layers
    assert sorted(f["ops"]) == sorted(re.search(r"%(\S+) =", ln).group(1) for ln in gathers)


def test_suggest_names_the_flax_logical_rules_to_change(cli):
    """Flax linen parameters named by logical axes on a 3-axis mesh: suggest says which rules to change.
    The oracles: Flax's own logical_to_mesh_sharding under the new rules, and XLA's compiled input
    shardings of the step lowered with them, both equal to the suggestion leaf by leaf."""
    require("flax", "flax is not installed (the [test] extra)")
    import flax.linen as nn

    script = os.path.join(MODELS, "flax_linen_logical.py")
    result = cli("suggest", script, "--format", "json", "-q")
    assert result.code == 0, result.err[-2000:]
    [r] = json.loads(result.out)["targets"]
    advice = r["logical_rules"]
    assert advice["reached"] == advice["covered"] == len(r["arguments"]) and not advice["exceptions"]
    module = _import(script)
    written = dict(module.RULES)
    assert {c["logical"] for c in advice["changes"]} == {
        name for name, axes in written.items() if tuple(nn.logical_to_mesh_axes(P(name), module.RULES))
        != tuple(nn.logical_to_mesh_axes(P(name), eval(advice["rules_text"].removeprefix("rules = "))))}
    rules = eval(advice["rules_text"].removeprefix("rules = "))
    mesh = module._mesh()
    boxed = module._logical_params(16, 128)
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules)
    params = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), nn.unbox(boxed), shardings)
    tokens = jax.ShapeDtypeStruct((16, 128), "int32",
                                  sharding=NamedSharding(mesh, nn.logical_to_mesh_axes(P("batch", None), rules)))
    compiled = jax.jit(module.train_step).lower(params, tokens).compile()
    for got, a in zip(jax.tree.leaves(compiled.input_shardings[0]), r["arguments"]):
        want = NamedSharding(mesh, P(*[tuple(x) if x else None for x in a["suggested"]]))
        assert got.is_equivalent_to(want, len(a["shape"])), (a["path"], got)
