"""rewrite's printed Python, pasted into the script, gives what rewrite promised (issue 46). The step is
lowered on abstract inputs that carry no sharding (``jax.eval_shape``'s, a ShapeDtypeStruct given none; jit's
in_shardings place them), where ``x.sharding`` of an input is None: a text reading it would pin nothing. The
oracle is XLA: the pasted text in ``jax.jit(..., out_shardings=...)``, lowered and compiled by JAX, its
``output_shardings``, ``memory_analysis()`` and the collectives in ``as_text()``."""

import json
import re

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

ABSTRACT = '''import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def step(state, batch):
    return {"w": state["w"].T @ state["w"], "b": state["b"] + batch.sum(0)}, batch.sum()


def inputs(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    state = jax.eval_shape(lambda: {"w": jnp.zeros((512, 512)), "b": jnp.zeros((512,))})
    batch = jax.ShapeDtypeStruct((128, 512), jnp.float32)
    in_shardings = ({"w": NamedSharding(mesh, P("data", "model")), "b": NamedSharding(mesh, P("model"))},
                    NamedSharding(mesh, P("data")))
    return mesh, state, batch, in_shardings


def shard_lint_targets(mesh_devices=None):
    _, state, batch, in_shardings = inputs(mesh_devices)
    return {"step": jax.jit(step, in_shardings=in_shardings, donate_argnums=0).lower(state, batch)}
'''
# An instruction's op (a tuple's type may hold "/*index=5*/"); an operand's name is never followed by "(".
_COLLECTIVE = re.compile(r" (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def _collectives(text: str) -> list[str]:
    return sorted(m.group(1) for line in text.splitlines() if (m := _COLLECTIVE.search(line)))


def test_pasted_rewrite_text_pins_abstract_inputs_state_as_rewrite_compiled_it(cli, tmp_path):
    script = tmp_path / "abstract_state.py"
    script.write_text(ABSTRACT)
    result = cli("rewrite", str(script), "--format", "json")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    assert [(a["path"], a["after"]) for a in t["out_shardings"]] == [("result[0]['w']", [["data"], ["model"]])]
    text = t["python_fix"]
    assert text and "x.sharding" not in text, text

    module = script_module(str(script))
    mesh, state, batch, in_shardings = module.inputs()
    assert jax.tree.leaves(jax.tree.map(lambda x: x.sharding is None, state)) == [True, True]  # nothing to read
    pasted = eval(text.removeprefix("out_shardings="),  # the user's names, as the text is pasted into the script
                  {"jax": jax, "NamedSharding": NamedSharding, "P": P, "mesh": mesh, "state": state, "batch": batch})
    written = jax.jit(module.step, in_shardings=in_shardings, donate_argnums=0).lower(state, batch).compile()
    fixed = jax.jit(module.step, in_shardings=in_shardings, out_shardings=pasted, donate_argnums=0
                    ).lower(state, batch).compile()

    # Every output on the layout rewrite compiled it to; the state back on its input's.
    flat = jax.tree.leaves(fixed.output_shardings)
    assert len(flat) == len(t["after"]["outputs"]) == 3
    for got, promised in zip(flat, t["after"]["outputs"]):
        spec = P(*[tuple(d) if d else None for d in promised["sharding"] or []])
        assert got.is_equivalent_to(NamedSharding(mesh, spec), len(promised["shape"])), (promised, got)
    assert fixed.output_shardings[0]["w"].is_equivalent_to(in_shardings[0]["w"], 2)
    assert not written.output_shardings[0]["w"].is_equivalent_to(in_shardings[0]["w"], 2)  # the bug it fixes

    # The figures rewrite promised are XLA's for the pasted program: donation now aliased, same collectives.
    before, after = written.memory_analysis(), fixed.memory_analysis()
    assert t["before"]["alias_bytes"] == before.alias_size_in_bytes
    assert t["after"]["alias_bytes"] == after.alias_size_in_bytes > before.alias_size_in_bytes
    assert t["after"]["argument_bytes"] == after.argument_size_in_bytes
    assert t["after"]["output_bytes"] == after.output_size_in_bytes
    assert t["after"]["temp_bytes"] == after.temp_size_in_bytes
    assert sorted(c["kind"] for c in t["after"]["collectives"] for _ in range(c["count"])) == \
        _collectives(fixed.as_text())
