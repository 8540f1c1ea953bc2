"""check on compiled HLO (an XLA dump): no mesh, so no "findings none" that reads as clean (moe14 F10, cfd14
F13); the same program's StableHLO, which carries the mesh, says "none" plainly."""

import json
import re

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

WITHOUT_MESH = ("none found, but most rules need the mesh, which compiled HLO does not carry: check the "
                "program's StableHLO (jax-shard-lint snapshot SCRIPT -o DIR writes it) or lint the script")


def test_a_dump_with_collectives_and_no_finding_says_the_rules_need_the_mesh(cli, tmp_path):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("data", "model")))
    dump = tmp_path / "dump"
    lowered = jax.jit(lambda a: a.T @ a).lower(x)
    compiled = lowered.compile(compiler_options={"xla_dump_to": str(dump)})
    assert re.search(r"all-reduce|all-gather", compiled.as_text())  # XLA compiled collectives
    [t] = json.loads(cli("check", str(dump), "--format", "json").out)["targets"]
    assert t["collectives"] and not t["mesh"] and not t["findings"]
    text = " ".join(cli("check", str(dump)).out.split())
    assert f"findings {WITHOUT_MESH}" in text
    markdown = cli("check", str(dump), "--format", "markdown").out
    assert WITHOUT_MESH in markdown
    # The StableHLO of the same program carries the mesh: its "none" is the rules' answer.
    mlir = tmp_path / "step.mlir"
    mlir.write_text(lowered.as_text())
    result = cli("check", str(mlir))
    assert "none found, but" not in result.out and re.search(r"findings\s+none", result.out), result.out
