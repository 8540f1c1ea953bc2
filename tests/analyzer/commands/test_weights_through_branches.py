"""SL103 names the argument behind a matmul that runs in a branch of a lax.cond inside a loop (newbie18 F3,
ott-jax's Sinkhorn error check): the operand reaches the branch through the loop's carried tuple and the
conditional's operand. XLA is the oracle of where the all-reduce runs and of the fix's figures."""

import os
import re

import jax
from fix_oracle import lint_findings, paths, with_layout
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "sl103_weight_through_branch.py")


def _branch_computations(text: str) -> set[str]:
    return {name for m in re.finditer(r"conditional\(.*branch_computations=\{([^}]*)\}", text)
            for name in re.findall(r"%?([\w.-]+)", m.group(1))}


def _computation_of(text: str, opcode: str) -> list[str]:
    found, current = [], None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.-]+) ", line)
        if head and line.rstrip().endswith("{"):
            current = head.group(1)
        elif re.search(rf"\b{opcode}(-start)?\(", line):
            found.append(current)
    return found


def _summed_products(text: str) -> list[str]:
    """The all-reduces of the whole f32[2048,2048] product in XLA's compiled text."""
    return re.findall(r"= f32\[2048,2048\][^ ]* all-reduce(?:-start)?\(", text)


def test_the_argument_behind_a_matmul_in_a_loop_s_conditional_branch_is_named(cli, monkeypatch):
    module = script_module(SCRIPT)
    text = module.shard_lint_targets()["features_split"].compile().as_text()
    # XLA sums the product in a branch of the conditional, not in the entry computation.
    assert _summed_products(text)
    assert set(_computation_of(text, "all-reduce")) & _branch_computations(text)
    target = lint_findings(cli, monkeypatch, SCRIPT, [], [])
    [finding] = [f for f in target["findings"] if f["rule"] == "SL103"]
    assert finding["parameter"] == "x"
    check = finding["fix_check"]
    assert check["verdict"] == "better" and finding["fix"].startswith("shard x as "), finding["fix"]
    # The layout the fix gives x, compiled by XLA: the product is no longer summed whole.
    patterns, spec = paths(check["change"])
    m, split = module.mesh(), module.P(None, ("data", "model"))
    shape = (module.POINTS, module.FEATURES)
    args = [module.spec(m, shape, split), module.spec(m, shape, split), module.spec(m, (), module.P())]
    moved = with_layout(args, ["x", "y", "scale"], patterns, spec)
    assert not _summed_products(jax.jit(module.step).lower(*moved).compile().as_text())
