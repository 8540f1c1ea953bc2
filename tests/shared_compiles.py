"""An example compiled directly with JAX, without the tool (the tests' oracle), once per test run.

Several test modules read the same program compiled for the same target: the MaxText-like step for a
TPU v5e is the oracle of its Pallas test, of MaxText's train_compile script and of the async-chain counts;
a TPU compile takes a minute or more on two cores. The compiled text and ``memory_analysis()`` are kept in
the run's folder (beside its analysis cache, tests/conftest.py), shared by pytest-xdist's workers: the
first to ask compiles while holding a lock on the entry, the others wait for it and read it."""

import fcntl
import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass

import jax


@dataclass(frozen=True)
class Memory:
    temp_size_in_bytes: int
    argument_size_in_bytes: int
    output_size_in_bytes: int
    alias_size_in_bytes: int


@dataclass(frozen=True)
class DirectCompile:
    """What a test reads of ``lowered.compile()``, with the compiled object's method names."""
    text: str
    memory: Memory

    def as_text(self) -> str:
        return self.text

    def memory_analysis(self) -> Memory:
        return self.memory


def _devices(platform: str, count: int):
    if platform.startswith("tpu"):
        from jax_shard_lint.analyzer.platforms.tpu_targets import resolve_target, tpu_devices

        return tpu_devices(resolve_target(platform, count, None))
    if platform == "cpu":
        return jax.devices()[:count]
    from jax_shard_lint.analyzer.platforms.gpu_targets import load_target, target_devices

    return target_devices(load_target(platform), count, 1)


def _run_folder() -> str:
    cache = os.environ.get("JAX_SHARD_LINT_CACHE_DIR")  # the run's analysis cache (tests/conftest.py)
    assert cache, "tests/conftest.py sets the run's folder"
    return os.path.join(os.path.dirname(cache), "direct-compiles")


def _compile(example: str, platform: str, count: int, params: dict) -> dict[str, dict]:
    sys.path.insert(0, "examples")
    try:
        module = importlib.import_module(example)
    finally:
        sys.path.pop(0)
    targets = module.shard_lint_targets(mesh_devices=_devices(platform, count), **params)
    out = {}
    for name, lowered in targets.items():
        compiled = lowered.compile()
        m = compiled.memory_analysis()
        out[name] = {"text": compiled.as_text(), "memory": [m.temp_size_in_bytes, m.argument_size_in_bytes,
                                                            m.output_size_in_bytes, m.alias_size_in_bytes]}
    return out


def direct_compiles(example: str, platform: str, count: int = 8, **params) -> dict[str, DirectCompile]:
    """``{target: DirectCompile}`` of examples/EXAMPLE.py's ``shard_lint_targets(mesh_devices=..., **params)``
    compiled for ``count`` devices of ``platform``, by JAX itself (the tool's figures are compared with it)."""
    key = json.dumps([example, platform, count, sorted(params.items()), jax.__version__], default=str)
    folder = _run_folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(key.encode()).hexdigest()[:24])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker compiles; the others wait, then read
        if os.path.exists(path + ".json"):
            with open(path + ".json", encoding="utf-8") as f:
                stored = json.load(f)
        else:
            stored = _compile(example, platform, count, params)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(stored, f)
            os.replace(path + ".tmp", path + ".json")
    return {name: DirectCompile(entry["text"], Memory(*entry["memory"])) for name, entry in stored.items()}
