"""The pytest plugin as a user's suite meets it: a fresh pytest process with the installed plugin,
the user's own test file, and pytest's own report of what passed and where a failure points."""

import os
import subprocess
import sys
import textwrap

USER_TESTS = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


    def lowered(axis):
        n = len(jax.devices())
        mesh = jax.make_mesh((n,), ("x",), axis_types=(AxisType.Auto,))
        x = jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=NamedSharding(mesh, P("x")))
        return jax.jit(lambda a: jnp.cumsum(a, axis=axis)).lower(x)


    def test_local(shard_lint):
        shard_lint.assert_no_collectives(lowered(1))


    def test_gathering(shard_lint):
        shard_lint.assert_no_collectives(lowered(0), kinds=("all-gather",))  # the user's failing line
''')


def _pytest(tmp_path, *args):
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTEST_ADDOPTS")}
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_one_device_is_not_a_vacuous_pass_and_failures_point_at_the_test(tmp_path):
    one = _pytest(tmp_path)
    # On JAX's default single CPU device both fail: no collective can run there, whatever the sharding.
    assert "2 failed" in one.stdout, one.stdout
    assert "compiled for 1 device" in one.stdout and "--shard-lint-devices" in one.stdout
    eight = _pytest(tmp_path, "--shard-lint-devices", "8")
    assert "1 failed, 1 passed" in eight.stdout, eight.stdout
    assert "1 unexpected collective(s)" in eight.stdout
    # pytest's traceback ends at the user's line; the plugin's own raise is hidden.
    assert "the user's failing line" in eight.stdout
    assert "raise AssertionError" not in eight.stdout and "testing.py" not in eight.stdout


def test_devices_from_the_pytest_configuration(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nshard_lint_devices = 8\n")
    result = _pytest(tmp_path)
    assert "1 failed, 1 passed" in result.stdout, result.stdout


PEAK_TEST = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


    def test_peak(shard_lint):
        mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
        x = jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=NamedSharding(mesh, P("x")))
        step = jax.jit(lambda a: (jnp.cumsum(a, axis=0), a * 2))
        shard_lint.assert_peak_below(step.lower(x), "1KiB")
''')


def test_a_users_run_without_jax_platforms_is_quiet_and_the_failure_names_shapes(tmp_path):
    """Issue 50: with the [gpu] extra installed and no GPU, the plugin's import of JAX printed three
    cudart_stub 'Could not find cuda drivers' blocks into the user's run; the peak failure read
    '8.0 MiB NoneNone from ...' for a buffer without a shape."""
    (tmp_path / "test_peak.py").write_text(PEAK_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTEST_ADDOPTS", "JAX_PLATFORMS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_peak.py",
                           "--shard-lint-devices", "8"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    before_results = done.stdout.split("= FAILURES =")[0] + done.stderr
    assert "cudart_stub" not in before_results and "Could not find cuda drivers" not in before_results
    assert "1 failed" in done.stdout, done.stdout[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("E ") and "per-device peak" in line]
    assert "None" not in line and "f32[512,256]" in line and "(reduce_window_sum in cumsum)" in line, line
