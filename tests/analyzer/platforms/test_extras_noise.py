"""What the accelerator extras do to the user's own ``import jax`` (README,
"Installing [gpu] is felt outside the tool"): with the CUDA plugin installed on a
machine without CUDA, JAX's unconditional plugin discovery logs a traceback,
which ``JAX_PLATFORMS=cpu`` turns off; libtpu adds nothing. If JAX stops calling
every plugin's initialize(), the first test fails and the README can say less."""

import os
import subprocess
import sys

from ci_deps import needs

PROBE = "import jax; jax.devices(); print('ok')"


def _run(**env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    proc = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    return proc.stderr


@needs("jax_plugins.xla_cuda12", "the [gpu] extra is not installed")
def test_the_cuda_plugin_traceback_and_its_one_line_silencer():
    assert "Jax plugin configuration error" in _run()
    assert "Jax plugin configuration error" not in _run(JAX_PLATFORMS="cpu")


@needs("libtpu", "the [tpu] extra is not installed")
def test_libtpu_says_nothing_to_a_cpu_program():
    assert "tpu" not in _run(JAX_PLATFORMS="cpu").lower()
