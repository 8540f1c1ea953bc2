"""tinylib, a library as ``pip install --target site`` writes it, for the tests of whose code a frame is
(tests/analyzer/commands/test_installed_beside_script.py, test_library_outside_script_folder.py): its source,
and XLA's oracle of the collective its line asks for."""

import re
import sys

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

LIBRARY = '''
import jax.numpy as jnp


def running_total(x):
    return jnp.cumsum(x, axis=0)  # reads along the rows the caller shards
'''


def assert_one_gather_at_the_library_line(site):
    """XLA: one all-gather of the whole f32[4096,1024] for tinylib's cumsum, which the library line asks for
    (tinylib imported from ``site`` for this compile alone)."""
    sys.path.insert(0, str(site))
    try:
        import tinylib
    finally:
        sys.path.remove(str(site))
    mesh = jax.make_mesh((8,), ("rows",), axis_types=(AxisType.Auto,))
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("rows", None)))
    text = jax.jit(lambda v: tinylib.running_total(v) * 2.0).lower(x).compile().as_text()
    gathers = [line for line in text.splitlines() if re.search(r"= f32\[4096,1024\]\S* all-gather\(", line)]
    assert len(gathers) == 1 and "tinylib/__init__.py" in text
