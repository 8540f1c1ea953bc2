"""``propagate --explain`` heads each value's chain (issue 46, newbie15's F8): a query that names several values
(a line with three matmuls) printed their chains run together, each ending at an argument, with nothing to
say where one value's chain stops and the next begins. Now each chain is indented under a line naming its value,
its sharding and the SSA name --explain also takes; the JSON's values carry the same chains."""

import json
import os
import re

SCRIPT = os.path.join("examples", "fsdp_tp_train_step.py")
QUERY = f"{SCRIPT}:30"
HEADING = re.compile(r"^  (\S+) (P\(.*\)) \((\S+) at (\S+)\):$")


def test_each_explained_value_has_its_own_headed_chain(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    result = cli("propagate", SCRIPT, "--explain", QUERY, "--no-compile")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    section = lines[lines.index(f"why {QUERY}:") + 1:]
    section = section[:next((i for i, line in enumerate(section) if not line.startswith("  ")), len(section))]
    headings = [(i, HEADING.match(line)) for i, line in enumerate(section) if not line.startswith("    ")]
    assert len(headings) >= 2 and all(m is not None for _, m in headings), section
    for (i, m), nxt in zip(headings, [i for i, _ in headings[1:]] + [len(section)]):
        chain = section[i + 1:nxt]
        assert chain and all(line.startswith("    ") for line in chain), chain
        # The chain starts at the value the heading names, with its sharding, and ends where the sharding is stated.
        assert chain[0].strip().startswith(f"{m.group(1)} is {m.group(2)}"), (m.group(0), chain[0])
        assert m.group(4) == QUERY
    # The heads name different values, which the JSON lists with the same chains.
    names = [m.group(3) for _, m in headings]
    assert len(set(names)) == len(names)
    result = cli("propagate", SCRIPT, "--explain", QUERY, "--no-compile", "--format", "json", "-q")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    explained = {v["name"]: v["provenance"] for v in target["values"] if v.get("provenance")}
    assert set(names) <= set(explained)
    assert [len(explained[n]) for n in names] == [nxt - i - 1 for (i, _), nxt in
                                                   zip(headings, [i for i, _ in headings[1:]] + [len(section)])]


LIBRARY_STEP = """\
import jax, jax.numpy as jnp, optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


def shard_lint_targets():
    mesh = jax.make_mesh((8,), ('data',), axis_types=(AxisType.Auto,))
    w = jax.ShapeDtypeStruct((256, 64), jnp.float32, sharding=NamedSharding(mesh, P('data')))
    tx = optax.adam(1e-3)
    state = jax.eval_shape(tx.init, w)

    def step(w, g, state):
        updates, state = tx.update(g, state, w)
        return optax.apply_updates(w, updates), state

    return {'step': jax.jit(step).lower(w, w, state)}
"""


def test_explain_takes_the_library_line_a_report_prints_as_via(cli, tmp_path, monkeypatch):
    """Every op of a library call sits at the user's one line; the report tells them apart by their ``via``
    (the library's line), and --explain takes that line too (newbie18 F6: ott's costs.py:560 was refused)."""
    monkeypatch.setenv("COLUMNS", "250")
    script = tmp_path / "adam_step.py"
    script.write_text(LIBRARY_STEP)
    result = cli("propagate", str(script), "--no-compile", "--all-values", "--format", "json", "-q")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    vias = [v["via"] for v in target["values"] if v.get("via")]
    assert vias and all("optax" in v["file"] for v in vias)
    via = vias[0]
    for query in (f"{via['file']}:{via['line']}", f"{os.path.basename(via['file'])}:{via['line']}"):
        result = cli("propagate", str(script), "--no-compile", "--explain", query)
        assert result.code == 0, result.err
        section = result.out.splitlines()[result.out.splitlines().index(f"why {query}:") + 1:]
        assert section[0].startswith("  ") and section[0].endswith(f"via {via['file']}:{via['line']}):"), section[:2]


CONSTRAINED_STEP = """\
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

MESH = jax.make_mesh((8,), ('data',), axis_types=(AxisType.Auto,))
DATA = NamedSharding(MESH, P('data'))
# haliax's x = hax.shard(x, mapping): the value computed on one line, constrained on the next


def step(x):
    y = jnp.sin(x) * 2.0
    y = jax.lax.with_sharding_constraint(y, DATA)
    return y.sum(axis=0)


def shard_lint_targets():
    x = jax.ShapeDtypeStruct((1024, 256), jnp.float32, sharding=NamedSharding(MESH, P()))
    return {'step': jax.jit(step).lower(x)}
"""


def test_a_constraint_that_states_its_operands_sharding_is_named_at_its_own_line(cli, tmp_path, monkeypatch):
    """newbie19's F9 (haliax): a value computed on one line and constrained on the next (``x = hax.shard(x, ...)``)
    takes the constraint's sharding as Shardy's import gives it to a constrained value used once; the chain said
    the constraint was at the line that computed the value (resample_step.py:31) instead of the constraint's (:44).
    The constraint's line is read from the lowered module's own location of sdy.sharding_constraint."""
    script = tmp_path / "constrained.py"
    script.write_text(CONSTRAINED_STEP)
    namespace: dict = {}
    exec(compile(CONSTRAINED_STEP, str(script), "exec"), namespace)
    text = namespace["shard_lint_targets"]()["step"].as_text(debug_info=True)
    [constraint] = [line for line in text.splitlines() if "sdy.sharding_constraint" in line]
    aliases = dict(re.findall(r"^(#loc\d*) = loc\((.*)\)$", text, re.M))
    reached, todo = set(), [re.search(r"loc\((#loc\d+)\)\s*$", constraint).group(1)]
    while todo:
        alias = todo.pop()
        if alias not in reached:
            reached.add(alias)
            todo += re.findall(r"#loc\d+", aliases.get(alias, ""))
    lines = {int(n) for a in reached for n in re.findall(r'constrained\.py":(\d+)', aliases.get(a, ""))}
    assert 11 in lines and 10 not in lines, lines  # the constraint's line, not `y = jnp.sin(x) * 2.0`'s

    monkeypatch.setenv("COLUMNS", "250")
    result = cli("propagate", str(script), "--explain", f"{script}:10", "--no-compile")
    assert result.code == 0, result.err
    stated = [line for line in result.out.splitlines()
              if "sharding_constraint (applied to its operand)" in line and line.startswith("    ")]
    assert stated and all(line.rstrip().endswith("constrained.py:11") for line in stated), stated
