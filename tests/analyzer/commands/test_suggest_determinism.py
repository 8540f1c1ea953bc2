"""``suggest``'s JSON is byte-identical run to run: two processes with different hash seeds (set and dict
order of strings differ between them), the first with an empty analysis cache, the second reading the
versions the first compiled. A model library's training step (optax AdamW MLP on a 4 x 2 mesh), so the
solver's plans, their propagation check and every compiled version are in the bytes compared.

Before: the report carried the solves' wall time (``solver.solve_seconds``), and the refine loop stopped
once the solves together had used ``--time-limit``, so on a loaded machine a run kept fewer plans than on
an idle one (the FSDP x TP step on H100: 26,015 variables for its first plan, 25,587 for its second)."""

import os
import subprocess

import pytest
from conftest import ROOT, console_script

MODEL = os.path.join("examples", "models", "optax_adamw_mlp.py")


def _suggest(seed: str, cache_dir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([console_script(), "suggest", MODEL, "--set", "batch=16", "--set", "seq=64",
                           "--format", "json", "-q", "--cache-dir", cache_dir],
                          cwd=ROOT, env=env, capture_output=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.slow
def test_suggest_json_is_byte_identical_across_hash_seeds_and_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    cold = _suggest("1", cache)
    assert os.listdir(cache), "the first run wrote no cache entry: the second would not read one"
    cached = _suggest("2", cache)
    assert cold.stdout == cached.stdout
    assert b'"solve_seconds"' not in cold.stdout
