"""The numbers in the whole-report goldens against XLA compiling the same programs here: every target's
memory (peak, arguments, outputs, temp, alias) against memory_analysis(), every collective's kind, bytes,
group size and runs per step against compiled.as_text() (tests/hlo_oracle.py), and the figures the
Markdown and terminal goldens print against the same, formatted here. The goldens are the tool's output,
written by tests/golden/generate.py; this is what makes them more than a snapshot."""

import importlib.util
import json
import os
import re

import pytest
from conftest import EXAMPLES, golden_dir
from hlo_oracle import collectives_per_step


def _compiled_targets(example: str) -> dict:
    """name -> compiled, for the example's shard_lint_targets() at its defaults (what lint compiles)."""
    spec = importlib.util.spec_from_file_location(f"_golden_{example[:-3]}", os.path.join(EXAMPLES, example))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: lowered.compile() for name, lowered in module.shard_lint_targets().items()}


def _xla_memory(compiled) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {"argument_bytes": m.argument_size_in_bytes, "output_bytes": m.output_size_in_bytes,
            "temp_bytes": m.temp_size_in_bytes, "alias_bytes": m.alias_size_in_bytes,
            "peak_bytes": m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
            - m.alias_size_in_bytes}


def _size(n: float) -> str:
    """Bytes as the reports print them: one decimal of the largest binary unit, else a byte count."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,} B"


@pytest.fixture(scope="module")
def value_function():
    return _compiled_targets("value_function_step.py")


def test_json_golden_memory_and_collectives_are_xlas(value_function):
    with open(os.path.join(golden_dir(), "value_function.json")) as f:
        golden = json.load(f)
    assert {t["name"] for t in golden["targets"]} == set(value_function)
    for target in golden["targets"]:
        compiled = value_function[target["name"]]
        xla = _xla_memory(compiled)
        assert {k: target["memory"][k] for k in xla} == xla, target["name"]
        expected = collectives_per_step(compiled.as_text(), target["num_devices"])
        got = {c["hlo_name"]: (c["kind"], c["bytes"], c["group_size"], c["count"]) for c in target["collectives"]}
        assert got == expected, target["name"]


def test_markdown_golden_prints_xlas_figures(value_function):
    with open(os.path.join(golden_dir(), "value_function.md")) as f:
        rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip().strip("|").split("|")]
                                              for line in f if line.startswith("| "))}
    for name, compiled in value_function.items():
        moved = sum(b * n for _, b, _, n in collectives_per_step(compiled.as_text(), 8).values())
        assert rows[name][2] == _size(_xla_memory(compiled)["peak_bytes"]), name  # peak / device
        assert rows[name][4] == _size(moved), name  # collectives / step


@pytest.fixture(scope="module")
def fsdp_step():
    return _compiled_targets("fsdp_tp_train_step.py")["train_step"]


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_golden_prints_xlas_figures(fsdp_step, width):
    compiled = fsdp_step
    xla = _xla_memory(compiled)
    collectives = collectives_per_step(compiled.as_text(), 8)
    with open(os.path.join(golden_dir(), f"fsdp_terminal_{width}.txt")) as f:
        text = re.sub(r"\s+", " ", f.read())
    assert f"peak / device {_size(xla['peak_bytes'])} " in text
    assert (f"parts temp {_size(xla['temp_bytes'])} + arguments {_size(xla['argument_bytes'])} + outputs "
            f"{_size(xla['output_bytes'])} - aliased {_size(xla['alias_bytes'])} ") in text
    moved = sum(b * n for _, b, _, n in collectives.values())
    assert f"collectives {len(collectives)} ops, {_size(moved)} per step per device " in text
