"""``suggest``'s printed Python pasted, as a user pastes it, into a script in the README's convention:
inputs are ``jax.ShapeDtypeStruct`` carrying a ``NamedSharding`` and the step is
``jax.jit(step, donate_argnums=...)``. The pasted script is lowered and compiled here: XLA's input and
output shardings are the report's suggested ones, the donation is kept, and memory_analysis()'s peak is
the one the report gives its chosen version.

Before, the text was one ``jax.jit(step, in_shardings=..., out_shardings=...)``: lowering it on inputs
that still carry the written shardings raised "Sharding passed to jit does not match the sharding on
the respective arg", and it dropped the script's ``donate_argnums``."""

import ast
import importlib.util
import json
import re

import jax
import pytest
from test_suggest_paste import assert_compiled_shardings_are_suggested

SCRIPT = '''
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

D, F, B = 256, 1024, 64

def step(params, x, y):
    def loss(p):
        h = jax.nn.gelu(x @ p["up"]) @ p["down"]
        return jnp.mean((h - y) ** 2)
    l, g = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, gg: p - 1e-2 * gg, params, g), l

def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=mesh_devices)
    params = {"up": jax.ShapeDtypeStruct((D, F), jnp.float32, sharding=NamedSharding(mesh, P("model", None))),
              "down": jax.ShapeDtypeStruct((F, D), jnp.float32, sharding=NamedSharding(mesh, P()))}
    x = jax.ShapeDtypeStruct((B, D), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    y = jax.ShapeDtypeStruct((B, D), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    return {"step": jax.jit(step, donate_argnums=(0,)).lower(params, x, y)}
'''
CALL = '    return {"step": jax.jit(step, donate_argnums=(0,)).lower(params, x, y)}'


def _pasted(code: str) -> str:
    """The script with its jit line replaced by the printed code, indented, and lowered as its comment
    says: ``.lower(*with_shardings(params, x, y))``."""
    # The jit call is the block's last statement, folded over lines at its brackets as printed.
    first = ast.parse(code).body[-1].lineno - 1
    lines, jit = code.splitlines()[:first], "\n".join(code.splitlines()[first:])
    body = "".join(f"    {line}\n" for line in lines)
    lower = ".lower(*with_shardings(params, x, y))" if "with_shardings" in code else ".lower(params, x, y)"
    return SCRIPT.replace(CALL + "\n", body + f'    return {{"step": {jit}{lower}}}\n')


def _code_block(markdown: str) -> str:
    block = markdown.split("```python\n", 1)[1].split("```", 1)[0]
    return block.strip("\n")


def test_printed_python_pastes_into_a_script_of_sharded_abstract_inputs_and_keeps_its_donation(cli, tmp_path):
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    # Through the run's analysis cache: the markdown report below is the same analysis, read back.
    result = cli("suggest", str(script), "--format", "json", "-q")
    assert result.code == 0, result.err
    target = json.loads(result.out)["targets"][0]
    assert target["abstract_inputs_text"] and target["jit_options_text"] == "donate_argnames=('params',)", target
    markdown = cli("suggest", str(script), "--format", "markdown", "-q")
    assert markdown.code == 0, markdown.err
    code = _code_block(markdown.out)
    assert "donate_argnames=('params',)" in code and not re.search(r"\bx\.sharding", code)

    assert "# abstract inputs (jax.ShapeDtypeStruct) must carry these: .lower(*with_shardings(" in code
    # As it was printed before: one jit line on the inputs as written. jit refuses it.
    old = (f"jax.jit(step, {target['in_shardings_text']}, {target['out_shardings_text']}, "
           f"{target['jit_options_text']})")
    spec = importlib.util.spec_from_file_location("old_paste", _write(tmp_path / "old.py", _pasted(old)))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert any(a["current_per_device_bytes"] != a["suggested_per_device_bytes"] for a in target["arguments"])
    with pytest.raises(ValueError, match="does not match the sharding"):
        module.shard_lint_targets()

    spec = importlib.util.spec_from_file_location("new_paste", _write(tmp_path / "new.py", _pasted(code)))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lowered = module.shard_lint_targets()["step"]
    donated = [a.donated for a in jax.tree.leaves(lowered.args_info)]
    assert donated == [True, True, False, False]  # params' two leaves, as the script donates them
    compiled = lowered.compile()
    mesh = jax.tree.leaves(compiled.input_shardings[0])[0].mesh
    assert_compiled_shardings_are_suggested(compiled, target, mesh)
    memory = compiled.memory_analysis()
    chosen = next(v for v in target["versions"] if v["name"] == target["chosen"])
    assert memory.alias_size_in_bytes > 0  # the donated params' buffers are reused for the new params
    peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
            - memory.alias_size_in_bytes)
    assert peak == chosen["peak_bytes"], (peak, chosen)

    # Without the donation the printed text used to drop, the same shardings peak higher.
    undonated = re.sub(r",\s*" + re.escape(target["jit_options_text"]), "", code)  # on its line, as folded
    assert undonated != code
    spec = importlib.util.spec_from_file_location("undonated", _write(tmp_path / "undonated.py", _pasted(undonated)))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    memory = module.shard_lint_targets()["step"].compile().memory_analysis()
    assert memory.alias_size_in_bytes == 0
    assert memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes > peak



def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)
