"""A library pip installed into a folder of the import path (``pip install --target site jax-cfd`` beside the
script, on PYTHONPATH: how issue 46's jax-cfd run was set up) is a library: a finding's source is the user's
line that called it, the library's line its ``via``. Only site-packages folders used to count, so every source
was a jax_cfd line. The program is compiled for real; where XLA put the gather is read from
``compiled.as_text()``'s metadata."""

import json
import re
import sys
import textwrap

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.inputs.files import installed_folders

_LIBRARY = '''
import jax.numpy as jnp


def running_total(x):
    return jnp.cumsum(x, axis=0)  # reads along the rows the caller shards
'''

_SCRIPT = '''
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import tinylib


def step(x):
    return tinylib.running_total(x) * 2.0


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("rows",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("rows", None)))
    return {"step": jax.jit(step).lower(x)}
'''


def _install(folder):
    """tinylib as pip --target writes it: the package and its dist-info, whose RECORD lists the package."""
    (folder / "tinylib").mkdir(parents=True)
    (folder / "tinylib" / "__init__.py").write_text(textwrap.dedent(_LIBRARY))
    info = folder / "tinylib-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("tinylib/__init__.py,sha256=x,10\ntinylib-1.0.dist-info/RECORD,,\n")


def test_a_library_installed_beside_the_script_is_a_library(cli, tmp_path, monkeypatch):
    site = tmp_path / "site"
    _install(site)
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "tinylib", raising=False)
    assert installed_folders((str(site), str(tmp_path))) == (str(site / "tinylib"),)

    # XLA: one all-gather of the whole f32[4096,1024] for the cumsum, which the library line asks for.
    import tinylib

    mesh = jax.make_mesh((8,), ("rows",), axis_types=(AxisType.Auto,))
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("rows", None)))
    text = jax.jit(lambda v: tinylib.running_total(v) * 2.0).lower(x).compile().as_text()
    gathers = [line for line in text.splitlines() if re.search(r"= f32\[4096,1024\]\S* all-gather\(", line)]
    assert len(gathers) == 1 and "tinylib/__init__.py" in text

    result = cli("lint", str(script), "--format", "json", "--fail-on", "never", "--no-fix-check")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    [f] = [f for f in target["findings"] if f["rule"] == "SL101"]
    assert f["source"]["file"].endswith("step.py") and f["source"]["line"] == 10, f["source"]
    assert f["via"]["file"].endswith("tinylib/__init__.py") and f["via"]["line"] == 6, f["via"]
