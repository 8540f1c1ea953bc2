"""A library pip installed beside the script (``pip install --target site jraph``) that the script puts on its
import path itself (``sys.path.insert(0, "site")``, not PYTHONPATH) is a library (issue 46, newbie15's F4):
its dist-info marks its top-level package installed, so a finding's source is the user's line that called it and
the library's line its ``via``; before, only folders on the tool's own import path were looked at, and every
source of a jraph GNN was a jraph line. And a location in a message is written as the report's sources are
(relative under the working directory), not absolute beside them. The program is compiled for real; XLA's gather
of the cumsum and the library line it comes from are read from ``compiled.as_text()``."""

import json
import os
import sys
import textwrap

from installed_library import LIBRARY, assert_one_gather_at_the_library_line

from jax_shard_lint.analyzer.inputs.files import folders_beside, installed_folders

_HELPER = '''
def scaled(params, x):
    return params["w"] * x
'''

_SCRIPT = '''
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site"))

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import helpers
import tinylib


def step(params, x):
    return {"w": params["w"] + tinylib.running_total(helpers.scaled(params, x))}


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("rows",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("rows", None)))
    return {"step": jax.jit(step).lower({"w": x}, x)}
'''


def _project(tmp_path):
    """The script, a helper module of the user's beside it, and tinylib as pip --target writes it under site/
    (the package and its dist-info, whose RECORD lists the package)."""
    site = tmp_path / "site"
    (site / "tinylib").mkdir(parents=True)
    (site / "tinylib" / "__init__.py").write_text(textwrap.dedent(LIBRARY))
    info = site / "tinylib-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("tinylib/__init__.py,sha256=x,10\ntinylib-1.0.dist-info/RECORD,,\n")
    (tmp_path / "helpers.py").write_text(textwrap.dedent(_HELPER))
    # The user's own package developed in place (setup.py develop's egg-info lists no installed files) stays theirs.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine.egg-info").mkdir()
    (tmp_path / "mine.egg-info" / "top_level.txt").write_text("mine\n")
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    return script, site


def test_a_library_the_script_puts_on_its_path_is_a_library_and_paths_read_one_way(cli, tmp_path, monkeypatch):
    script, site = _project(tmp_path)
    assert str(site) not in sys.path
    assert installed_folders(folders_beside((str(tmp_path),))) == (str(site / "tinylib"),)

    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tinylib", "helpers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert_one_gather_at_the_library_line(site)

    monkeypatch.chdir(tmp_path)  # as the newcomer ran it: from the script's folder
    monkeypatch.delitem(sys.modules, "tinylib", raising=False)
    result = cli("lint", "step.py", "--format", "json", "--fail-on", "never", "--no-fix-check")
    assert result.code == 0, result.err
    [target] = json.loads(result.out)["targets"]
    [f] = [f for f in target["findings"] if f["rule"] == "SL101"]
    assert (f["source"]["file"], f["source"]["line"]) == ("step.py", 16), f["source"]
    assert (f["via"]["file"], f["via"]["line"]) == (os.path.join("site", "tinylib", "__init__.py"), 6), f["via"]
    # The argument's first use, in the user's other file, is written as the report writes a source: relative.
    [donation] = [f for f in target["findings"] if f["rule"] == "SL202"]
    assert donation["message"].endswith("params is first used at helpers.py:3"), donation["message"]
