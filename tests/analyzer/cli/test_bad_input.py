"""Every bad input gives one line naming the file and the problem, exit code 2,
and no traceback (Shardy-style: one fixture per error, with its exact message)."""

import os

import pytest
from ci_deps import require

BAD = os.path.join("fixtures", "bad_input")
VALUE = os.path.join("examples", "value_function_step.py")


@pytest.mark.parametrize("argv, message", [
    (["lint", "nope/missing.py"], "nope/missing.py: no such file"),
    (["lint", f"{BAD}/raises.py"],
     f"{BAD}/raises.py: the script raised RuntimeError: the data directory /mnt/data is not mounted (line 3)"),
    (["lint", f"{BAD}/syntax_error.py"], f"{BAD}/syntax_error.py: syntax error at line 1: invalid syntax"),
    (["lint", f"{BAD}/no_entry.py"],
     f"{BAD}/no_entry.py: defines no function shard_lint_targets() (see README: 'What a script gives us')"),
    (["lint", f"{BAD}/no_targets.py"], f"{BAD}/no_targets.py: shard_lint_targets() returned no targets"),
    (["lint", f"{BAD}/not_lowered.py"],
     f"{BAD}/not_lowered.py: target 'step' is a PjitFunction, not a jax.stages.Lowered "
     "(call .lower(*args) on the jitted function)"),
    (["lint", f"{BAD}/entry_raises.py", "--set", "batch=7"],
     f"{BAD}/entry_raises.py: shard_lint_targets() raised ValueError: batch 7 does not divide the data axis (line 2)"),
    (["lint", VALUE, "--target", "nope"],
     f"{VALUE}: unknown target 'nope' (targets: sharded_on_grid, sharded_on_states)"),
    (["lint", VALUE, "--set", "bacth=3"],
     f"{VALUE}: unknown param 'bacth' (shard_lint_targets takes: states, grid_points, n_choices)"),
    (["lint", VALUE, "--set", "novalue"], "--set: expected NAME=VALUE, got 'novalue'"),
    (["lint", VALUE, "--budget", "80 gigs"],
     "--budget: unparsable budget: not a size: '80 gigs' (write e.g. 80GiB, 512MiB, 1.5TB or a byte count)"),
    (["lint", VALUE, "--device", "h300"],
     "--device: unknown device 'h300' (known: h100, h100-nvl, h200, b200, a100-80g, a100-40g, tpu-v4, tpu-v5e, "
     "tpu-v5p, tpu-v6e)"),
    (["lint", VALUE, "--threshold", "nope=1"], "--threshold: unknown threshold 'nope'"),
    (["lint", VALUE, "--threshold", "headroom-fraction=2"],
     "--threshold: threshold headroom-fraction: 2 is not between 0 and 1"),
    (["lint", VALUE, "--ignore", "SL999"], "--ignore: unknown rule 'SL999' in ignore"),
    (["lint", f"{BAD}/bad_config/script.py"],
     f"{os.path.abspath(BAD)}/bad_config/pyproject.toml [tool.jax-shard-lint]: unknown key 'budgett'"),
    (["lint", VALUE, "--config", "nope.toml"], "nope.toml: no such file"),
    (["rule", "SL999"], "SL999: no such rule"),
    (["lint", VALUE, "--platform", "gpu"],
     "--platform gpu: JAX sees no GPU (is jax[cuda12] installed and a GPU visible?); "
     "use --platform cpu for virtual CPU devices"),
])
def test_bad_input(cli, argv, message):
    result = cli(*argv)
    assert result.code == 2
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(f"jax-shard-lint: error: {message}")
    assert "Traceback" not in result.err


def test_an_indivisible_batch_names_the_argument_the_axis_and_the_multiple(cli):
    """JAX's IndivisibleError names a sharding and a shape, not the argument; the line names all three."""
    result = cli("lint", f"{BAD}/indivisible_batch.py", "--set", "batch=6")
    assert result.code == 2 and result.out == "" and "Traceback" not in result.err
    # JAX 0.12 itself prints the failing line's location (a bare print) before it raises: the user's code's
    # output goes to stderr, so that one line comes before ours.
    lines = [ln for ln in result.err.strip().splitlines() if not ln.endswith(":22:26 (shard_lint_targets)")]
    assert lines == [
        f"jax-shard-lint: error: {BAD}/indivisible_batch.py: input_ids (passed as ids) has shape (6, 16): its dim 0 "
        "is 6 (--set batch=6), which mesh axis 'data' (size 4) of P('data', None) does not divide: use a multiple "
        "of 4, or fit --param batch --multiple-of 4 (line 22)"]


def test_debug_shows_the_traceback(cli):
    result = cli("lint", f"{BAD}/raises.py", "--debug")
    assert result.code == 2 and "Traceback" in result.err


@pytest.mark.parametrize("make, problem", [
    (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),  # would block the read forever
    (lambda p: os.symlink("/dev/zero", p), "is a device, not a regular file"),  # would be read until OOM
])
@pytest.mark.parametrize("command", ["gate", "check"])
def test_inputs_that_are_not_regular_files(cli, tmp_path, make, problem, command):
    name = "baseline.json" if command == "gate" else "step.mlir"
    path = tmp_path / name
    make(str(path))
    argv = (["gate", "--baseline", str(path), str(tmp_path / "missing.mlir")] if command == "gate"
            else ["check", str(path)])
    result = cli(*argv)
    assert result.code == 2
    assert result.err.strip() == f"jax-shard-lint: error: {path}: {problem}", result.err


def test_an_oversized_baseline_is_refused_before_it_is_read(cli, tmp_path):
    from jax_shard_lint.analyzer.inputs.files import MAX_BASELINE_BYTES

    path = tmp_path / "baseline.json"
    with open(path, "wb") as f:
        f.truncate(MAX_BASELINE_BYTES + 1)  # sparse: no disk used
    result = cli("gate", "--baseline", str(path))
    assert result.code == 2
    assert result.err.strip() == (f"jax-shard-lint: error: {path}: is {MAX_BASELINE_BYTES + 1:,} bytes, more than "
                                  f"the {MAX_BASELINE_BYTES:,} this reads")


@pytest.mark.parametrize("command", ["lint", "propagate", "fit"])
def test_platform_gpu_without_one_is_one_line_in_a_fresh_process(command):
    """In a fresh process (the in-process CLI has JAX started on the CPU already): the CUDA
    plugin that fails to load once made JAX assert (exit 3) and log its traceback."""
    import subprocess

    from conftest import ROOT, console_script

    from jax_shard_lint.analyzer.adapter import jax_adapter

    if jax_adapter.gpu_devices():
        pytest.skip("a GPU is visible")
    extra = ["--param", "batch", "--budget", "1GiB"] if command == "fit" else []
    done = subprocess.run([console_script(), command, VALUE, "--platform", "gpu", "-q", *extra],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "jax-shard-lint: error: --platform gpu: JAX sees no GPU (is jax[cuda12] installed and a GPU visible?); "
        "use --platform cpu for virtual CPU devices"]


EAGER_KEY = """import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("data",), devices=mesh_devices)
    with jax.set_mesh(mesh):
        key = jax.random.key(0)
        x = jax.ShapeDtypeStruct((64, 32), jnp.float32, sharding=NamedSharding(mesh, P("data")))
        return {"step": jax.jit(lambda x, k: x + jax.random.normal(k, x.shape)).lower(x, key)}
"""


def test_an_eager_op_on_compile_only_devices_says_how_to_keep_it_abstract(cli, tmp_path):
    require("jax_plugins.xla_cuda12", "the [gpu] extra (jax-cuda12-plugin) is not installed")
    script = tmp_path / "eager_key.py"
    script.write_text(EAGER_KEY)
    result = cli("lint", str(script), "--platform", "h100", "-q")
    assert result.code == 2 and result.out == ""
    [line] = result.err.splitlines()
    assert "raised AttributeError" in line and "(line 9)" in line  # JAX's own error, at the user's line
    assert line.endswith("the script ran an operation eagerly (outside jax.jit) on the h100 devices, which compile "
                         "without one and cannot run anything; keep what it makes abstract (jax.eval_shape(lambda: "
                         "jax.random.key(0)), a jax.ShapeDtypeStruct) or make it inside the jitted step")
    # The abstract key lints.
    script.write_text(EAGER_KEY.replace("jax.random.key(0)", "jax.eval_shape(lambda: jax.random.key(0))"))
    assert cli("lint", str(script), "--platform", "h100", "-q", "--fail-on", "never").code == 0


def _one_line(result) -> str:
    """The one error line (JAX 0.12 prints the failing line's location itself before it raises)."""
    assert result.code == 2 and result.out == "" and "Traceback" not in result.err
    lines = [ln for ln in result.err.strip().splitlines() if not ln.endswith("(shard_lint_targets)")]
    assert len(lines) == 1, result.err
    return lines[0]


def test_an_indivisible_tuple_of_axes_is_quoted_whole_and_fit_is_given_what_it_needs(cli):
    """JAX's IndivisibleError for P(('data', 'model'), None) on a batch of 12 written into the script: the spec is
    quoted whole (it was cut at the tuple's ')'), and as no --set or default of shard_lint_targets gives 12,
    the line pads it to 16 or shards it on an axis that divides 12 (4 and 2 both do), and, tokens being a whole
    argument split on its leading dim, says fit needs it made a parameter first."""
    line = _one_line(cli("lint", f"{BAD}/indivisible_tuple_axes.py"))
    assert line == (
        f"jax-shard-lint: error: {BAD}/indivisible_tuple_axes.py: tokens has shape (12, 16): its dim 0 is 12, which "
        "mesh axis 'data' (size 4) x 'model' (size 2) of P(('data', 'model'), None) does not divide: pad it to 16 "
        "(the next multiple of 8) where the script sets it, or shard dim 0 on 'data' (size 4) or 'model' (size 2), "
        "which divide 12 (if it is the batch: make it a parameter of shard_lint_targets, then fit --param NAME "
        "--multiple-of 8) (line 19)")


def test_an_indivisible_vocabulary_is_padded_or_sharded_on_an_axis_that_divides_it(cli):
    """BERT's 30522-row word embedding on 'data' (size 4): a model size, not a batch, so no fit advice; pad to
    30524 (30522 = 4 x 7630 + 2) or shard on 'model' (size 2), which divides 30522 (= 2 x 15261)."""
    line = _one_line(cli("lint", f"{BAD}/indivisible_vocab.py"))
    # Passed inside the parameters' pytree with lower(*args): named by the step's parameter and the tuple's item.
    assert line.startswith(f"jax-shard-lint: error: {BAD}/indivisible_vocab.py: params['embeddings']['word'] "
                           "(passed as args[0]) has shape (30522, 16)"), line
    assert ("has shape (30522, 16): its dim 0 is 30522, which mesh axis 'data' (size 4) of P('data', None) does not "
            "divide: pad it to 30524 (the next multiple of 4) where the script sets it, or shard dim 0 on 'model' "
            "(size 2), which divides 30522 (line 22)") in line, line
    assert "fit" not in line.split(": error: ", 1)[1].replace("indivisible_vocab.py", "")


def test_an_indivisible_argument_of_a_star_parameter_is_named_by_its_index(cli):
    """A variadic step (``def step(ids, *tables)``): the value JAX cannot split is the second of ``tables``, and the
    line says so, as the script passes it (``word``), not "an argument"."""
    line = _one_line(cli("lint", f"{BAD}/indivisible_star_parameter.py"))
    assert line.startswith(f"jax-shard-lint: error: {BAD}/indivisible_star_parameter.py: tables[1] (passed as "
                           "word) has shape (30522, 16): its dim 0 is 30522, which mesh axis 'data' (size 4) of "
                           "P('data', None) does not divide"), line


def test_an_indivisible_default_names_the_parameter_fit_sizes(cli):
    """The same batch given by shard_lint_targets' default (batch=12), no --set: fit is given that parameter."""
    line = _one_line(cli("lint", f"{BAD}/indivisible_default_batch.py"))
    assert line.endswith("of P(('data', 'model'), None) does not divide: use a multiple of 8 (shard_lint_targets' "
                         "batch=12 by default: fit --param batch --multiple-of 8) (line 19)"), line
    # What it says to run runs: fit sizes that parameter in multiples of 8.
    result = cli("fit", f"{BAD}/indivisible_default_batch.py", "--param", "batch", "--multiple-of", "8",
                 "--range", "8:64", "--budget", "1GiB")
    assert result.code == 0, result.err


HOST_CALLBACK = """import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P


def step(x):
    y = jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return jnp.sin(y)


def shard_lint_targets(mesh_devices=None):
    mesh = jax.make_mesh((8,), ("data",), devices=mesh_devices)
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    return {"step": jax.jit(step).lower(x)}
"""


def test_a_host_callback_on_a_compile_only_gpu_says_what_cannot_lower_and_what_lints(cli, tmp_path):
    """A diffrax step (equinox's error_if callbacks) on --platform h100: JAX's own error blamed a missing GPU
    backend, as if the script were wrong; the line says it is the host callback, and what lints."""
    require("jax_plugins.xla_cuda12", "the [gpu] extra (jax-cuda12-plugin) is not installed")
    script = tmp_path / "host_callback.py"
    script.write_text(HOST_CALLBACK)
    line = _one_line(cli("lint", str(script), "--platform", "h100", "-q"))
    assert line.startswith(f"jax-shard-lint: error: {script}: the step calls back to the host (jax.pure_callback, "
                           "io_callback or jax.debug.callback), which JAX lowers only where the target's backend is "
                           "present, and a compile-only GPU target has none here"), line
    assert "EQX_ON_ERROR=nan" in line and line.endswith("(line 15)")
    # On the CPU the same step lints.
    assert cli("lint", str(script), "-q", "--fail-on", "never").code == 0


def test_a_library_installed_beside_the_script_is_named_after_the_user_s_line(cli, tmp_path):
    """A library pip installed into a folder beside the script (``pip install --target site``) that raises is a
    library, not the user's code: the error names the user's line, then the library's (newbie18 F11: ott's
    fixed_point_loop.py was named alone, as if it were the user's)."""
    site = tmp_path / "site"
    (site / "solverlib").mkdir(parents=True)
    (site / "solverlib" / "__init__.py").write_text("def solve(x):\n    raise ValueError('carry types differ')\n")
    (site / "solverlib-1.0.dist-info").mkdir()
    (site / "solverlib-1.0.dist-info" / "RECORD").write_text("solverlib/__init__.py,,\n")
    script = tmp_path / "calls_library.py"
    script.write_text("import sys, os\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), 'site'))\n"
                      "import solverlib\n\n\ndef helper():\n    return solverlib.solve(1)\n\n\n"
                      "def shard_lint_targets():\n    return helper()\n")
    result = cli("lint", str(script), "-q")
    assert result.code == 2 and result.out == ""
    [line] = result.err.splitlines()
    library = site / "solverlib" / "__init__.py"
    assert line.endswith(f"shard_lint_targets() raised ValueError: carry types differ (line 7, in helper; raised in "
                         f"{library}:2, in solve)"), line
