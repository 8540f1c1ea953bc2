"""A newcomer's first hour (issue 50), through the console script's own entry point.

The one-line messages themselves are cases of the bad-input corpus
(fixtures/bad_input/corpus/generate.py, 'A newcomer's first mistakes'); here,
what a message cannot show: how soon it comes."""

import os
import subprocess
import sys

from conftest import ROOT

REFUSED_BEFORE_JAX = """
import sys
from jax_shard_lint.analyzer.cli.main import main
code = main(sys.argv[1:])
print(code, 'jax' in sys.modules, 'jaxlib' in sys.modules)
"""


def _main_in_a_fresh_python(*argv):
    env = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    return subprocess.run([sys.executable, "-c", REFUSED_BEFORE_JAX, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_missing_script_or_file_is_refused_before_jax_is_imported(tmp_path):
    for argv in (["lint", str(tmp_path / "nope" / "train.py")], ["check", str(tmp_path / "m.mlir")],
                 ["propagate", str(tmp_path / "m.mlir")], ["run", str(tmp_path / "train.py")],
                 ["lint", str(tmp_path / "train.py") + ":targets"]):
        done = _main_in_a_fresh_python(*argv)
        assert done.stdout.split() == ["2", "False", "False"], (argv, done.stdout, done.stderr[-2000:])
        missing = argv[1].split(":")[0]
        assert done.stderr == f"jax-shard-lint: error: {missing}: no such file\n"


def test_a_module_name_is_not_taken_for_a_missing_file():
    """package.module:function is imported, not opened: the child says what the import said."""
    done = _main_in_a_fresh_python("lint", "no_such_package.steps:targets", "-q")
    assert done.stdout.split()[0] == "2"
    assert "no_such_package.steps: cannot import module: ModuleNotFoundError" in done.stderr


FSDP = os.path.join("examples", "fsdp_tp_train_step.py")


def _console(*argv, columns):
    from conftest import console_script

    env = {k: v for k, v in os.environ.items() if k != "JAX_SHARD_LINT_IN_PROCESS"}
    env["COLUMNS"] = str(columns)
    return subprocess.run([console_script(), *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_main_example_in_80_and_130_columns_reads_in_the_users_terms(tmp_path):
    """No name broken across lines at 80 columns, no padding in a file written with -o, the
    SL102 axes in words, and at 130 columns the ops that made the live buffers named as the
    user wrote them (not cut from the left)."""
    out = tmp_path / "report.txt"
    done = _console("lint", FSDP, "--fail-on", "never", "-q", "-o", str(out), columns=80)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not [line for line in lines if line != line.rstrip()]  # no trailing spaces in the file
    cells = [cell.strip() for line in lines if line.startswith("│") for cell in line.split("│")[1:-1]]
    assert "collective-permute" in cells and "fsdp,tp" in cells
    assert not [c for c in cells if c.startswith(("-permute", ",", "]"))]  # nothing split inside a name
    assert ":(" not in text  # Shardy's sub-axis notation
    assert "over fsdp, tp and pairs of fsdp devices next to each other run 8x per step" in " ".join(
        line.strip() for line in lines)
    wide = _console("lint", FSDP, "--fail-on", "never", "-q", columns=130)
    live = wide.stdout.split("Live at the peak")[1].split("Inputs and outputs")[0]
    produced = [line.split("│")[4].strip() for line in live.splitlines() if line.startswith("│")]
    assert "reduce_sum in log_softmax (backward)" in produced and "argument" in produced, produced
    assert not [p for p in produced if p.startswith("...")]


def test_propagate_and_run_name_values_as_the_user_wrote_them():
    """propagate's values were SSA names (%arg0, @_interp:%72), run's live buffers XLA's (copy.57, tuple.64)."""
    import re

    done = _console("propagate", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_grid",
                    "-q", columns=130)
    assert done.returncode == 0, done.stderr[-2000:]
    values = done.stdout.split("Sharded values")[1].split("└")[0]
    shown = [line.split("│")[1].strip() for line in values.splitlines() if line.startswith("│")]
    assert shown[:2] == ["argument v_next", "argument v_next (into _interp)"] and "slice in _interp" in shown, shown
    assert not [v for v in shown if "%" in v or v.startswith("@")]
    done = _console("run", os.path.join("examples", "train_loop.py"), "--devices", "8", "-q", "--", "--steps", "2",
                    columns=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not re.search(r"\b(copy|tuple)\.\d+\b", done.stdout)
    assert "copy (added by XLA)" in done.stdout


def test_the_readme_commands_leave_the_checkout_clean_and_the_examples_say_what_the_report_says(tmp_path):
    """The README writes report.html and shard_lint/ in the folder it runs in: in this checkout
    they are ignored, not left untracked. value_function_step.py's docstring said SL101 reports an
    all-gather; the report says all-reduce."""
    import json
    import shutil

    if shutil.which("git") and os.path.exists(os.path.join(ROOT, ".git")):
        ignored = subprocess.run(["git", "check-ignore", "report.html", "shard_lint/baseline.json"], cwd=ROOT,
                                 capture_output=True, text=True)
        assert ignored.stdout.split() == ["report.html", "shard_lint/baseline.json"], ignored.stderr
    script = os.path.join("examples", "value_function_step.py")
    done = _console("lint", script, "--target", "sharded_on_grid", "--format", "json", "-q", "--fail-on", "never",
                    "--no-fix-check", columns=100)
    [target] = json.loads(done.stdout)["targets"]
    [sl101] = [f for f in target["findings"] if f["rule"] == "SL101"]
    kind = sl101["message"].split(" over ")[0]
    with open(os.path.join(ROOT, script), encoding="utf-8") as f:
        doc = f.read().split('"""')[1]
    assert kind == "all-reduce" and "all-reduce" in doc and "all-gather" not in doc


def test_sweep_without_a_budget_claims_no_fit_and_puts_the_cpu_caveat_first():
    done = _console("sweep", os.path.join("examples", "value_function_step.py"), "-q", columns=100)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "fits" not in header and "among those that fit" not in out
    said = " ".join(out.split())
    assert "that fits" not in said and "Fastest (no budget given): sharded_on_states" in said
    assert said.index("Nominal CPU figures") < said.index("Fastest")


def test_fit_against_a_device_says_its_peaks_are_a_cpu_compiles():
    done = _console("fit", os.path.join("examples", "remat_layer_stack.py"), "--param", "batch", "--device", "h100",
                    "--multiple-of", "4", "-q", columns=130)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("note: these peaks are a CPU compile's, measured against the h100's memory; the h100's own differ: "
            "--platform h100 compiles for it") in done.stdout
    budget = _console("fit", os.path.join("examples", "remat_layer_stack.py"), "--param", "batch", "--budget", "4GiB",
                      "--multiple-of", "4", "-q", "--format", "json", columns=130)
    assert '"budget_source": null' in budget.stdout


LAYOUT = """<script>
var m = document.querySelector('.memory'), t = document.querySelector('.memory .live table');
var svg = document.querySelector('svg.memplot'), cell = document.querySelector('.memory .live td');
var line = parseFloat(getComputedStyle(cell).lineHeight) || 20;
document.body.setAttribute('data-layout', [m.offsetWidth, t.offsetWidth, svg.getBoundingClientRect().width,
  cell.getBoundingClientRect().height, line].map(Math.round).join(' '));
</script>"""


def test_the_html_memory_section_at_1400_pixels(tmp_path):
    """The plot's marked point is the curve's own highest point, with its value; XLA's live-range
    figure is labelled as XLA's; the table of live buffers takes the page's width below a larger plot,
    its byte counts on one line; the step-time card says 'nominal CPU figure' before the seconds."""
    import re
    import shutil

    from jax_shard_lint.passes.common.byte_sizes import format_bytes

    page = tmp_path / "report.html"
    done = _console("lint", FSDP, "--format", "html", "-o", str(page), "-q", "--fail-on", "never", "--no-fix-check",
                    columns=100)
    assert done.returncode == 0, done.stderr[-2000:]
    html = page.read_text()
    curve_max = int(re.search(r'data-curve-max="(\d+)"', html).group(1))
    assert f"highest point of the curve: {format_bytes(curve_max)} at step" in html
    assert re.search(r"XLA('|&#x27;)s live-range peak, step \d+: [\d.]+ \w+ "
                     r"\(its heap simulator('|&#x27;)s count\)", html)
    assert "live-range peak at step" not in html
    card = html.split("estimated step time")[1]
    assert card.index("nominal CPU figure") < card.index("(compute ")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return
    page.write_text(html.replace("</body>", LAYOUT + "</body>"))
    dom = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2400", "--dump-dom",
                          "--virtual-time-budget=2000", page.as_uri()], capture_output=True, text=True, timeout=120)
    layout = re.search(r'data-layout="([\d ]+)"', dom.stdout).group(1)
    section, table, plot, cell_height, line = map(int, layout.split())
    assert table >= 0.95 * section and plot >= 900, (section, table, plot)
    assert cell_height < 2 * line, (cell_height, line)  # '512.0 MiB' on one line


def test_suggest_says_when_its_cost_model_cannot_tell_the_versions_apart(tmp_path):
    """value_function's five versions all read 'cost model 1.22 s' while XLA's compiles estimate 946 ms to 8.16 s."""
    import json

    page = tmp_path / "suggest.html"
    done = _console("suggest", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_grid",
                    "--format", "html", "-o", str(page), "-q", columns=100)
    assert done.returncode == 0, done.stderr[-2000:]
    as_json = _console("suggest", os.path.join("examples", "value_function_step.py"), "--target", "sharded_on_grid",
                       "--format", "json", "-q", columns=100)
    [target] = json.loads(as_json.stdout)["targets"]
    from jax_shard_lint.passes.common.durations import format_seconds

    models = {format_seconds(v["model"]["seconds"]) for v in target["versions"] if v.get("model")}
    compiled = {format_seconds(v["estimated_seconds"]) for v in target["versions"]}
    assert len(models) == 1 and len(compiled) > 1
    assert "The cost model gives every version" in page.read_text()
