"""transformers' Flax Llama (examples/models/llama_flax.py: 2 layers, hidden 256, 8 heads over 2 KV heads,
vocab 32000, batch 128, seq 128, optax AdamW on data=4 x model=2) laid out the textbook Megatron way: q, k,
v, gate and up column-parallel, o_proj and down_proj row-parallel, the batch on data (issue #46: lint blamed
o_proj's all-reduce with SL103, whose printed fix made XLA rematerialize).

The oracle is XLA: the step compiled with ``jax.jit(...).lower(...).compile().as_text()`` in the test, and
the row-parallel all-reduces (count, bytes, group) read from the text with the test's own regular
expressions; lint must class each as intended, with its reason, and raise no finding on any of them."""

from __future__ import annotations

import os
import re

import pytest
from ci_deps import require
from conftest import EXAMPLES, lint_targets
from hlo_oracle import collectives_per_step
from scripts import script_module

LLAMA = os.path.join(EXAMPLES, "models", "llama_flax.py")
LAYERS, BATCH, SEQ, HIDDEN, DATA = 2, 128, 128, 256, 4
LAYER = "params['model']['layers']['{}']"


def _needs():
    for lib in ("transformers", "flax", "optax"):
        require(lib, f"{lib} is not installed (the [test] extra)")


def _lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}


@pytest.fixture(scope="module")
def compiled_text():
    """XLA's text of the script's step, ``jax.jit(...).lower(...).compile()``d in the test, once per set of
    parameters for the module's tests (the Megatron layout's is read by two)."""
    texts: dict[tuple, str] = {}

    def text(**params) -> str:
        key = tuple(sorted(params.items()))
        if key not in texts:
            texts[key] = script_module(LLAMA).shard_lint_targets(**params)["train_step"].compile().as_text()
        return texts[key]

    return text


@pytest.mark.parametrize("layout, column", [("megatron", "P(None, 'model')"), ("fsdp", "P('data', 'model')")])
def test_the_llamas_row_parallel_sums_are_intended_and_named_by_no_finding(cli, compiled_text, layout, column):
    _needs()
    text = compiled_text(layout=layout)
    lines = _lines(text)
    # XLA's forward all-reduces of o_proj's and down_proj's dots (the backward's op_names hold transpose(...)).
    row = {n: re.search(r"layers/(\d+)/\w+/(o_proj|down_proj)/dot_general", lines[n]).groups()
           for n, c in collectives_per_step(text, 8).items()
           if c[0] == "all-reduce" and "transpose(" not in lines[n]
           and re.search(r"/(o_proj|down_proj)/dot_general", lines[n])}
    assert sorted(row.values()) == sorted((str(k), p) for k in range(LAYERS) for p in ("o_proj", "down_proj"))
    nbytes = BATCH // DATA * SEQ * HIDDEN * 4  # the residual stream, f32, per device: the pair's input width
    assert {collectives_per_step(text, 8)[n][1:] for n in row} == {(nbytes, 2, 1)}  # over model, once a step

    (t,) = lint_targets(cli, LLAMA, "--set", f"layout={layout}")
    by_name = {c["hlo_name"]: c for c in t["collectives"]}
    for name, (layer, projection) in row.items():
        c = by_name[name]
        assert (c["kind"], c["bytes"], c["count"], c["intent"], c["mesh_axes"]) == (
            "all-reduce", nbytes, 1, "activation", ["model"]), c
        assert c["why"].startswith("the row-parallel half of a tensor-parallel pair (Megatron's): "), c["why"]
        prefix = LAYER.format(layer)
        if projection == "o_proj":
            halves = [f"{prefix}['self_attn']['{p}']['kernel'] {column}" for p in ("q_proj", "k_proj", "v_proj")]
            assert f"{prefix}['self_attn']['o_proj']['kernel'] P('model')" in c["why"]
            assert "attention combined head by head" in c["why"], c["why"]
        else:
            halves = [f"{prefix}['mlp']['{p}']['kernel'] {column}" for p in ("gate_proj", "up_proj")]
            assert f"{prefix}['mlp']['down_proj']['kernel'] P('model')" in c["why"]
        assert all(h in c["why"] for h in halves), (halves, c["why"])
    named = {op for f in t["findings"] for op in [f["subject"], *(f["ops"] or [])]}
    assert not named & set(row), [f["rule"] for f in t["findings"] if {f["subject"], *(f["ops"] or [])} & set(row)]
    assert not [f for f in t["findings"] if f["rule"] == "SL103"]


def _gathers_of_the_stream(text: str) -> dict[str, int]:
    """XLA's all-gathers over model of the residual stream (f32[batch/data, seq, hidden] per device): name -> bytes."""
    lines = _lines(text)
    return {n: c[1] for n, c in collectives_per_step(text, 8).items()
            if c[0] == "all-gather" and c[2] == 2 and re.search(rf"= f32\[{BATCH // DATA},{SEQ},{HIDDEN}\]", lines[n])}


def _moved(args, change: str):
    """The arguments with the layout a solver fix names (``A, B -> P(...), C -> P(...) (returned in that layout)``),
    made the way a user writes it; each path as the fix prints it (the argument's name, then keystr)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    parts = re.split(r" -> (P\((?:[^()]|\([^()]*\))*\))(?:, |(?= \())", change.removesuffix(" (solver)"))
    specs = {p: eval(spec, {"P": P}) for named, spec in zip(parts[::2], parts[1::2]) for p in named.split(", ")}
    moved = set()

    def leaf(name):
        def move(path, x):
            full = name + jax.tree_util.keystr(path)
            if full not in specs:
                return x
            moved.add(full)
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(x.sharding.mesh, specs[full]))
        return move

    out = tuple(jax.tree_util.tree_map_with_path(leaf(n), a) for n, a in zip(("params", "opt_state"), args[:2]))
    assert moved == set(specs), set(specs) - moved
    return (*out, args[2])


@pytest.mark.slow  # 74 s in CI's pinned leg (a lint with its solver fix and XLA's oracle compiles of the fix)
def test_o_proj_on_its_output_features_reshards_the_residual_stream_and_the_fix_moves_it_back(cli, monkeypatch,
                                                                                           compiled_text):
    """The mistake: o_proj P(None, 'model'), as if it were a column half. XLA's text: the residual stream comes out
    of o_proj split on hidden and is gathered over model before each matmul that reads it, forward and backward
    (4 MiB each, under unexplained-reshard-bytes' 16 MiB default: lint's note counts them); the Megatron layout
    compiles none. At a 4 MiB threshold each gather is one finding's, and a printed fix gives o_proj back
    P('model'): XLA measures that layout better (state returned in it, as the fix says). The finding that
    groups the gathers names o_proj as their cause, at the user's line: the gathers of each norm's output after
    the first o_proj (XLA's operand: input_layernorm's or post_attention_layernorm's multiply) rebuild
    the stream o_proj's output split, and several projections read each (issue #46: it named the lm_head, the
    one weight reading the last of them). Known gap, not asserted: at the default threshold none names it."""
    _needs()
    import jax
    from fix_oracle import better, lint_findings, measured
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    module = script_module(LLAMA)
    fn, options, args = module.step_and_inputs(o_proj="output")
    written, as_written = measured(fn, options, args, 2)
    gathers = _gathers_of_the_stream(written.as_text())
    assert len(gathers) >= 4 * LAYERS and set(gathers.values()) == {BATCH // DATA * SEQ * HIDDEN * 4}
    assert not _gathers_of_the_stream(compiled_text(layout="megatron"))

    # The donation (SL202) and its three compiles are not this test's: the other findings are the same without it.
    target = lint_findings(cli, monkeypatch, LLAMA, ("--set", "o_proj=output", "--threshold",
                                                     "unexplained-reshard-bytes=4MiB", "--ignore", "SL202"), ())
    for name in gathers:
        assert len([f for f in target["findings"] if name in [f["subject"], *(f["ops"] or [])]]) == 1, name
    lines = _lines(written.as_text())
    after_o_proj = r"layers/0/post_attention_layernorm/mul|layers/[1-9]/\w+_layernorm/mul"
    operand = {n: re.search(r"all-gather\(%([\w.\-]+)", lines[n]).group(1) for n in gathers}
    normed = {n for n in gathers if re.search(after_o_proj, lines[operand[n]])}  # forward's and backward's
    assert len({operand[n] for n in normed}) == 2 * LAYERS - 1, sorted(normed)
    [stream] = [f for f in target["findings"] if normed <= set(f["ops"] or [f["subject"]])]
    assert stream["parameter"] == "params['model']['layers'][*]['self_attn']['o_proj']['kernel']", stream["parameter"]
    assert stream["parameter_sharding"] == [[], ["model"]]
    assert "it gathers the output of the matmul by that weight" in stream["message"], stream["message"]
    # The other weights it names are what they are, each with its own figure: weights written as o_proj is, each
    # traced to some of the group's gathers (on jax 0.10.2 XLA's one reader of each is that weight's dot: layer 0's
    # v_proj reads the first layer's normed embedding, before any o_proj; jax 0.12 fuses the readers into the
    # norms), counted in the group's figures (XLA's 4 MiB stream gathers), not more causes of o_proj's gathers
    # ("the same holds for" read as three causes).
    assert "the same holds for" not in stream["message"], stream["message"]
    named = re.findall(r"(params\S*?\]) \((\d+), ([\d.]+) MiB per step\)", stream["message"])
    assert {w for w, _, _ in named} == {"params['lm_head']['kernel']",
                                        "params['model']['layers'][*]['self_attn']['v_proj']['kernel']"}, named
    assert 0 < sum(int(n) for _, n, _ in named) < len(stream["ops"])
    for weight, count, mib in named:
        assert float(mib) * 2**20 == int(count) * BATCH // DATA * SEQ * HIDDEN * 4 == int(count) * max(
            gathers.values()), (weight, count, mib)
    with open(LLAMA) as script:  # the user's line: the model's call in the step
        [line] = [k for k, text in enumerate(script, 1) if "logits = model(" in text]
    assert (stream["source"]["file"], stream["source"]["line"]) == ("examples/models/llama_flax.py", line)
    o_proj = re.compile(r"params\['model'\]\['layers'\]\['\d'\]\['self_attn'\]\['o_proj'\]\['kernel'\]")
    fixes = [f for f in target["findings"] if f["fix_check"] and f["fix_check"]["verdict"] == "better"
             and o_proj.search(f["fix_check"]["change"])]
    assert fixes, [f["fix"] for f in target["findings"]]
    for f in fixes:
        check = f["fix_check"]
        assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
        moved = _moved(args, check["change"])
        for layer in moved[0]["model"]["layers"].values():  # o_proj given back its row-parallel layout
            assert tuple(layer["self_attn"]["o_proj"]["kernel"].sharding.spec)[:1] == ("model",)
        state = jax.tree.map(lambda x: x.sharding, moved[:2])
        mesh = jax.tree.leaves(args[2:])[0].sharding.mesh
        _, after = measured(fn, options, moved, 2, out_shardings=(*state, NamedSharding(mesh, P())))
        assert better(as_written, after), (check["change"], as_written, after)
