"""The compile memo (analyzer/backend/compile_memo.py), below the analysis cache: what the tool reads from one XLA
compile, kept under a key of what that compile depends on and of no report setting. Its contract:
- a report setting changed (a threshold, the ignore list, the budget): the analysis cache misses, the memo hits,
  nothing is compiled (tests/analyzer/cache/test_analysis_cache.py::test_any_changed_part_is_a_miss);
- the module, a compile option, the devices or the target changed: both miss;
- a memo hit gives the report a fresh compile gives, byte for byte (lint --format json): on the main example,
  on a fix candidate (compiled from StableHLO text), and on a compile-only TPU and GPU target. (On the main
  example with its dozen fix candidates it was checked too, once: the same JSON, 271 s on a loaded machine.)"""

import glob
import os
import shutil
from dataclasses import replace

import pytest
from conftest import EXAMPLES

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend import compile_memo
from jax_shard_lint.analyzer.cache.cache_key import cache_key
from jax_shard_lint.analyzer.context.config import Settings

STEP = os.path.join("fixtures", "gate", "step_v1.py")


@pytest.fixture
def compiles(monkeypatch):
    """Every XLA compile of a jitted target and of StableHLO text, counted."""
    count = {"n": 0}
    for name in ("compile_lowered", "compile_stablehlo_text"):
        real = getattr(jax_adapter, name)

        def counted(*args, _real=real, **kwargs):
            count["n"] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(jax_adapter, name, counted)
    return count


REMAT = os.path.join(EXAMPLES, "remat_layer_stack.py")
SMALL = ("--set", "batch=8", "--set", "seq=128", "--set", "d_model=256", "--set", "d_ff=512")


# The main example's fix candidates cost a dozen compiles; a script with one candidate takes the same path (StableHLO
# text compiled for its figures) at a fraction of the cost.
ONE_CANDIDATE = (os.path.join("fixtures", "scripts", "sl105_unexplained_reshard.py"), "--target", "contracted")


@pytest.mark.parametrize("script, target, fix_checks", [
    (os.path.join(EXAMPLES, "fsdp_tp_train_step.py"), (), False),
    (ONE_CANDIDATE[0], ONE_CANDIDATE[1:], True),
    (REMAT, ("--platform", "tpu-v5p", *SMALL), False),
    (REMAT, ("--platform", "h100", *SMALL), False),
], ids=["main-example-cpu", "fix-candidate-cpu", "tpu-v5p", "h100"])
def test_a_memo_hit_is_the_report_of_a_fresh_compile(cli, compiles, monkeypatch, tmp_path, script, target,
                                                     fix_checks):
    """The first lint compiles (a miss: the report reads the compile itself, as with --no-cache) and stores each
    compile; with the reports removed, the second reads every compile from the memo: the same JSON."""
    if fix_checks:  # the fix candidates, compiled from StableHLO text, go through it too
        monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    args = ("lint", script, *target, "--format", "json", "--fail-on", "never", "-q", "--cache-dir",
            str(tmp_path / "cache"))
    fresh = cli(*args)
    assert fresh.code == 0, fresh.err[-2000:]
    per_lint = compiles["n"]
    assert len(glob.glob(str(tmp_path / "cache" / "compiles" / "v*" / "*" / "*.json"))) == per_lint > 0
    assert per_lint > 1 or not fix_checks
    shutil.rmtree(tmp_path / "cache" / "v1")  # the reports gone, the compiles kept: every compile a memo hit
    hit = cli(*args)
    assert compiles["n"] == per_lint, "a compile the memo holds was compiled again"
    assert hit.code == 0 and hit.out == fresh.out


def _key(settings=None, text="module {}", entry="stablehlo", options=None, devices=None):
    settings = settings or Settings()
    devices = jax_adapter.cpu_devices()[:2] if devices is None else devices
    return cache_key(compile_memo.compile_parts(entry, text, options or {"num_partitions": 2}, devices, settings))


def test_the_key_is_what_the_compile_depends_on_and_no_report_setting():
    base = Settings()
    reported = {_key(s) for s in (base, replace(base, budget_bytes=1 << 20), replace(base, ignore=frozenset({"SL201"})),
                                  replace(base, first_party=("mypkg",)), replace(base, check_fixes=True),
                                  replace(base, options={"replicating-collective-bytes": 1024}))}
    assert reported == {_key(base)}
    compiled = {_key(base), _key(text="module @other {}"), _key(options={"num_partitions": 4}),
                _key(entry="lowered"), _key(devices=jax_adapter.cpu_devices()[2:4]),
                _key(replace(base, platform="h100")), _key(replace(base, platform="h100", hosts=2))}
    assert len(compiled) == 7
