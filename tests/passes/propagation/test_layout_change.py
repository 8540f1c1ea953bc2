"""The reshard byte model (propagation/layout_change.py) against XLA: a value on one sharding that
out_shardings wants on another, compiled on a 2 x 4 mesh; each collective XLA emits, its kind and the
bytes one device receives read from compiled.as_text() (tests/hlo_oracle.py), equals a move of the
model. Kills the local-shard factor dropped: after an all-gather, the all-to-all moves the gathered
shard, not the original one."""

import jax
import jax.numpy as jnp
import pytest
from hlo_oracle import compiled_collectives
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.passes.propagation.layout_change import LayoutMove, layout_moves

_SIZES = {"x": 2, "y": 4}
_SHAPE = (64, 256)


def _dims(spec: P) -> list[tuple[tuple[str, int, int], ...]]:
    out = []
    for d in spec:
        names = () if d is None else (d,) if isinstance(d, str) else tuple(d)
        out.append(tuple((n, 1, _SIZES[n]) for n in names))
    return out


@pytest.mark.parametrize("src, dst", [
    (P("x", "y"), P(None, "y")),  # all-gather over x
    (P("x", None), P(None, "x")),  # all-to-all of the local shard
    (P(("x", "y"), None), P(None, None)),  # all-gather over both
    (P("x", "y"), P("y", None)),  # all-gather over x, then the gathered shard's all-to-all over y
    (P("y", "x"), P(None, "y")),  # the same, the other way round
    (P("y", None), P("x", None)),  # y gives way to a smaller x: a permute, then a gather of the rest
    (P(("x", "y"), None), P("y", None)),
    (P("x", "y"), P(None, ("y", "x"))),
    (P(None, "x"), P("x", None)),  # to a lower dimension: an all-to-all all the same
    (P(("x", "y"), None), P("x", None)),  # the kept major axis moves nothing: a gather over y alone
], ids=str)
def test_layout_moves_equal_xlas_collectives(src, dst):
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    value = jax.ShapeDtypeStruct(_SHAPE, jnp.float32, sharding=NamedSharding(mesh, src))
    text = jax.jit(lambda v: v * 2, out_shardings=NamedSharding(mesh, dst)).lower(value).compile().as_text()
    xla = sorted((kind, nbytes) for kind, nbytes, _ in compiled_collectives(text, 8).values())
    assert xla  # every case changes the layout
    moves = layout_moves("f32", _SHAPE, _dims(src), _dims(dst))
    assert sorted((m.kind, m.bytes) for m in moves) == xla


def test_a_moves_sentence_names_one_axis_or_all_of_them():
    # Kills the last label read from the wrong end, and the plural chosen for one axis.
    gather = LayoutMove("all-gather", (), 0, ("leaves the value", "leave the value"))
    assert gather.sentence(["x"]) == "x leaves the value"
    assert gather.sentence(["x", "y"]) == "x and y leave the value"
    assert gather.sentence(["x", "y", "z"]) == "x, y and z leave the value"
