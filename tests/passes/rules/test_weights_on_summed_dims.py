"""Issue 46: every collective a weight sharded on a dimension its op sums over causes is named at that weight,
and the fix printed is XLA's measure of the layout it names.

Two fixtures (fixtures/scripts/): a ViT patch embedding whose convolution kernel is sharded on its height (the
halo of image rows XLA trades for the kernel's gradient reaches the kernel through no operand: the
convolution's name stack ties them), and a 2-layer encoder whose query, key and value kernels are sharded on
the dimension they contract (each 1 MiB all-reduce under SL103's smallest size, 6 MiB per step together).
The oracles are XLA's: the collectives in ``compiled.as_text()`` (tests/hlo_oracle.py's expressions, never the
tool's parser) and each fix's layout compiled as a user writes it (tests/fix_oracle.py)."""

from __future__ import annotations

import functools
import os

import jax
from conftest import FIXTURES
from fix_oracle import assert_fixes_measured, lint_findings
from hlo_oracle import compiled_collectives
from jax.sharding import PartitionSpec as P
from scripts import script_module

CONV = os.path.join(FIXTURES, "scripts", "sl105_conv_kernel_on_height.py")
QKV = os.path.join(FIXTURES, "scripts", "sl103_qkv_contracting_layers.py")
LOW = ("--threshold", "unexplained-reshard-bytes=256KiB", "--threshold", "replicating-collective-bytes=16MiB")


def _leading_state(module):
    """The fixture's step with its returned params in a tuple, as the oracle reads the state outputs (the same
    compiled program: XLA's outputs are the flattened leaves either way), named as the fixture names them."""
    @functools.wraps(module.step)
    def step(*args):
        return (module.step(*args),)
    return step


def _xla_collectives(module, spec) -> tuple[str, dict[str, tuple[str, int, int]]]:
    text = jax.jit(module.step, donate_argnums=(0,)).lower(*module.arguments(spec)).compile().as_text()
    return text, compiled_collectives(text, 8)


def test_convolution_kernel_is_named_at_the_halo_xla_trades(cli, monkeypatch):
    module = script_module(CONV)
    target = lint_findings(cli, monkeypatch, CONV, ("--target", "on_height", *LOW), ())
    [finding] = [f for f in target["findings"] if f["rule"] == "SL105"]
    # The collectives it stands for are XLA's collective-permutes of the image rows, every one of them.
    _, written = _xla_collectives(module, P("model", None, None, None))
    permutes = {name for name, (kind, _, _) in written.items() if kind == "collective-permute"}
    assert permutes and set(finding["ops"]) == permutes
    assert finding["parameter"] == "params['kernel']"
    assert "no argument of the step" not in finding["message"]
    assert "XLA emits it for the convolution by that kernel" in finding["message"]
    # Off the window, on the output features: XLA compiles the step with no collective-permute at all.
    _, kept = _xla_collectives(module, P(None, None, None, "model"))
    assert not any(kind == "collective-permute" for kind, _, _ in kept.values())
    # The printed fix is that layout, with XLA's figures.
    assert "shard params['kernel'] as P(None, None, None, 'model') instead of P('model')" in finding["fix"]
    assert "SL105" in assert_fixes_measured(target, _leading_state(module), {"donate_argnums": (0,)},
                                            module.arguments(P("model", None, None, None)), 1)


def test_projections_sharded_on_their_contracting_dim_are_one_finding(cli, monkeypatch):
    module = script_module(QKV)
    target = lint_findings(cli, monkeypatch, QKV, ("--target", "contracted"), ())
    [finding] = [f for f in target["findings"] if f["rule"] == "SL103"]
    # XLA's forward all-reduces of the three projections' partial sums, one combined all-reduce per layer.
    text, written = _xla_collectives(module, P("model", None))
    forward_sums = {name for name, (kind, size, _) in written.items() if kind == "all-reduce"
                    and size == 3 * 8 * 16 * 2048 * 4
                    and "transpose(" not in next(line for line in text.splitlines() if f"%{name} = " in line)}
    assert len(forward_sums) == 2 and set(finding["ops"]) == forward_sums
    assert finding["count"] == 6
    assert {p.strip() for p in finding["fix"].split(" as ")[0].removeprefix("shard ").replace(" and", ",")
            .split(",")} == {"layers[*]['query']", "layers[*]['key']", "layers[*]['value']"}
    assert "SL103" in assert_fixes_measured(target, _leading_state(module), {"donate_argnums": (0,)},
                                            module.arguments(P("model", None)), 1)
