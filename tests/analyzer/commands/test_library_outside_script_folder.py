"""A library pip installed into a folder outside the script's own (``pip install --target ../site haliax``) that
the script puts on its import path itself (``sys.path.insert(0, "../site")``, in a shim it imports first) is a
library (issue 46, newbie19's F3-F5, haliax): whose code a frame is was decided before the script ran, from the
tool's own import path and the script's folder, so every source was a haliax line; a cached report made with
the library's folder on PYTHONPATH was read back for a run without it (the key held no library folder); and
``check`` on the snapshot of a correct run pointed into the library (a snapshot recorded no library folder).
The program is compiled for real; XLA's all-gather for the cumsum, and the library line it comes from, are read
from ``compiled.as_text()``."""

import json
import os
import sys
import textwrap

from installed_library import LIBRARY, assert_one_gather_at_the_library_line

from jax_shard_lint.analyzer.backend.cached_analysis import settings_parts
from jax_shard_lint.analyzer.context.config import Settings

_SHIM = '''
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "site"))
'''

_SCRIPT = '''
import shim  # noqa: F401  (puts ../site on the import path)

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import tinylib


def step(params, x):
    return {"w": params["w"] + tinylib.running_total(params["w"] * x)}


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("rows",), axis_types=(AxisType.Auto,), devices=mesh_devices)
    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32, sharding=NamedSharding(mesh, P("rows", None)))
    return {"step": jax.jit(step).lower({"w": x}, x)}
'''
_CUMSUM_LINE = 12


def _project(tmp_path):
    """progs/step.py and its shim; tinylib as pip --target writes it into site/, beside progs/, not under it."""
    site = tmp_path / "site"
    (site / "tinylib").mkdir(parents=True)
    (site / "tinylib" / "__init__.py").write_text(textwrap.dedent(LIBRARY))
    info = site / "tinylib-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("tinylib/__init__.py,sha256=x,10\ntinylib-1.0.dist-info/RECORD,,\n")
    progs = tmp_path / "progs"
    progs.mkdir()
    (progs / "shim.py").write_text(textwrap.dedent(_SHIM))
    (progs / "step.py").write_text(textwrap.dedent(_SCRIPT))
    return progs, site


def _gather_sources(report_json):
    [target] = json.loads(report_json)["targets"]
    [f] = [f for f in target["findings"] if f["rule"] == "SL101"]
    return (f["source"]["file"], f["source"]["line"]), f.get("via") and f["via"]["file"]


def test_a_library_the_script_puts_on_its_path_from_outside_its_folder_is_a_library(cli, tmp_path, monkeypatch):
    progs, site = _project(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # sys.path as it was comes back after the test
    for name in ("tinylib", "shim"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    assert_one_gather_at_the_library_line(site)
    monkeypatch.delitem(sys.modules, "tinylib", raising=False)

    monkeypatch.chdir(progs)  # as the newcomer ran it: from the script's folder
    library = os.path.join(str(site), "tinylib", "__init__.py")
    result = cli("lint", "step.py", "--format", "json", "--fail-on", "never", "--no-fix-check")
    assert result.code == 0, result.err
    assert _gather_sources(result.out) == (("step.py", _CUMSUM_LINE), library)

    # check on the snapshot of that run (no script run: the snapshot says whose code its locations are), in a
    # process whose import path the script never changed.
    snapshot = cli("snapshot", "step.py", "-o", str(tmp_path / "snap"), "-q")
    assert snapshot.code == 0, snapshot.err
    sys.path[:] = [p for p in sys.path if os.path.abspath(p) != str(site)]
    checked = cli("check", str(tmp_path / "snap"), "--format", "json", "--fail-on", "never", "--no-fix-check")
    assert checked.code == 0, checked.err
    source, via = _gather_sources(checked.out)
    assert (os.path.basename(source[0]), source[1]) == ("step.py", _CUMSUM_LINE) and via and via.endswith(
        os.path.join("tinylib", "__init__.py")), (source, via)


def test_a_reports_cache_key_holds_the_library_folders_on_the_import_path(tmp_path, monkeypatch):
    _, site = _project(tmp_path)
    settings = Settings(devices=8)
    without = settings_parts(settings)["library_folders"]
    monkeypatch.syspath_prepend(str(site))
    assert str(site / "tinylib") not in without
    assert str(site / "tinylib") in settings_parts(settings)["library_folders"]
