"""The row-parallel half of a tensor-parallel pair is intended, with its reason naming the weights, in the
shapes real models write it: a gated MLP (SwiGLU, LLaMA's: the gate and up projections column-parallel,
multiplied elementwise after silu, then the row-parallel down projection) and a pair whose activation XLA
gathers over another mesh axis between its halves (the FSDP x TP example). The oracle is XLA: each program
is compiled here, and the all-reduce, its bytes and the ops between the two halves are read from
``compiled.as_text()`` with regular expressions of the test's own."""

import os
import re
from math import prod

from ci_deps import needs
from conftest import EXAMPLES, FIXTURES, lint_targets
from hlo_oracle import collectives_per_step
from scripts import script_module

SWIGLU = os.path.join(FIXTURES, "scripts", "swiglu_tensor_parallel.py")


def _lines(text: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}


def _operands(line: str) -> list[str]:
    return re.findall(r"%([\w.\-]+)", line.split(" = ", 1)[1].split("(", 1)[1].split("), ")[0])


def _dims(line: str) -> list[int]:
    return [int(d) for d in re.search(r"= \w+\[([\d,]*)\]", line).group(1).split(",") if d]


def _is_dot(line: str) -> bool:
    return "dot_general" in line and (" dot(" in line or " fusion(" in line or "custom-call(" in line)


def _through_layout(lines: dict[str, str], name: str) -> str:
    """Back from ``name`` through bitcasts, copies and converts (XLA's, between a dot and its sum)."""
    while re.search(r"= \S+ (bitcast|copy|convert)\(", lines[name]):
        name = _operands(lines[name])[0]
    return name


def _forward_sum(text: str, devices: int = 8) -> tuple[str, tuple]:
    """The one forward all-reduce of a dot's partial sums (no ``transpose(`` in its op_name) and its
    (kind, bytes, group size, runs) from XLA's text."""
    lines = _lines(text)
    forward = [n for n, c in collectives_per_step(text, devices).items() if c[0] == "all-reduce"
               and "transpose(" not in lines[n] and "dot_general" in lines[n]]
    assert len(forward) == 1, forward
    return forward[0], collectives_per_step(text, devices)[forward[0]]


def test_a_swiglu_down_projection_closes_a_gated_pair_intended_with_its_reason(cli):
    """XLA's text: the all-reduce adds a dot's partial sums; that dot's activation operand is a product whose
    two factors each come from a dot by x (the gate's through silu, the up's directly): SwiGLU. It sums as
    many elements as x (the pair's input width) and is 16x the down weight's shard gathered, the ratio at
    which SL103 used to call it an expanding projection. The tool: intended (activation), its why naming
    the three weights, and no SL103."""
    text = script_module(SWIGLU).shard_lint_targets()["train_step"].compile().as_text()
    lines = _lines(text)
    summed, (kind, nbytes, group, runs) = _forward_sum(text)
    assert (kind, group, runs) == ("all-reduce", 2, 1)
    down = _through_layout(lines, _operands(lines[summed])[0])
    assert _is_dot(lines[down])
    down_ops = _operands(lines[down])
    weight = next(o for o in down_ops if "parameter(" in lines[o])
    product = next(o for o in down_ops if o != weight)
    assert "mul" in lines[product] and len(_operands(lines[product])) == 2  # silu(gate) * up

    def dots_behind(name, seen):  # the dots the product is an elementwise function of
        if name in seen or "parameter(" in lines[name]:
            return set()
        seen.add(name)
        if _is_dot(lines[name]):
            return {name}
        return set().union(*(dots_behind(o, seen) for o in _operands(lines[name])))

    halves = dots_behind(product, set())
    assert len(halves) == 2  # the gate's and the up's
    # Each half multiplies x (the argument named "x", behind a bitcast) by its weight (a "w[...]" argument).
    x = {o for h in halves for o in _operands(lines[h]) if 'op_name="x"' in lines[_through_layout(lines, o)]}
    assert len(x) == 1 and all(any('op_name="w[' in lines[_through_layout(lines, o)] for o in _operands(lines[h]))
                               for h in halves)
    width = prod(_dims(lines[x.pop()]))
    assert prod(_dims(lines[summed])) == width and nbytes == width * 4
    assert nbytes >= 8 * prod(_dims(lines[weight])) * 4 * group  # SL103's expansion ratio, 16x here

    (t,) = lint_targets(cli, SWIGLU)
    [c] = [c for c in t["collectives"] if c["hlo_name"] == summed]
    assert (c["kind"], c["bytes"], c["intent"]) == ("all-reduce", nbytes, "activation")
    assert c["why"].startswith("the row-parallel half of a tensor-parallel pair")
    for path in ("w['down'] P('model')", "w['gate'] P(None, 'model')", "w['up'] P(None, 'model')"):
        assert path in c["why"], c["why"]
    assert not [f for f in t["findings"] if f["rule"] == "SL103"]
    assert [c["hlo_name"] for c in t["collectives"] if c["why"]] == [summed]


def test_a_pair_whose_activation_is_gathered_over_another_axis_between_its_halves_is_intended(cli):
    """fsdp_tp_train_step: the down projection (P(None, 'tp', 'fsdp')) contracts tp, the dimension the up
    projection (P(None, 'fsdp', 'tp')) produced; XLA gathers the gelu'd activation over fsdp (the batch,
    another axis than the pair's) between the halves. XLA's text: the forward all-reduce over tp adds the
    down dot's partial sums, whose activation operand is an all-gather of a one-operand fusion of the up dot,
    and it sums as many elements as that dot's input. The tool: intended, its why naming both weights and
    the gather; the gather itself stays a reshard with its own finding."""
    text = script_module(os.path.join(EXAMPLES, "fsdp_tp_train_step.py")).shard_lint_targets()["train_step"] \
        .compile().as_text()
    lines = _lines(text)
    summed, (kind, nbytes, group, runs) = _forward_sum(text)
    assert (kind, group, runs) == ("all-reduce", 2, 8)
    down = _through_layout(lines, _operands(lines[summed])[0])
    gather = next(o for o in map(lambda n: _through_layout(lines, n), _operands(lines[down]))
                  if " all-gather(" in lines[o])
    [gelu] = _operands(lines[gather])
    [up] = _operands(lines[gelu])
    assert _is_dot(lines[up]) and "bsd,df->bsf" in lines[up]
    stream = _through_layout(lines, _operands(lines[up])[0])
    assert prod(_dims(lines[summed])) * 4 == nbytes and prod(_dims(lines[stream])) == prod(_dims(lines[summed]))

    (t,) = lint_targets(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))
    [c] = [c for c in t["collectives"] if c["hlo_name"] == summed]
    assert (c["bytes"], c["count"], c["intent"], c["mesh_axes"]) == (nbytes, runs, "activation", ["tp"])
    assert c["why"].startswith("the row-parallel half of a tensor-parallel pair"), c["why"]
    assert "params['layers']['down'] P(None, 'tp', 'fsdp')" in c["why"]
    assert "params['layers']['up'] P(None, 'fsdp', 'tp')" in c["why"] and f"{gather} gathered it over fsdp" in c["why"]
    [g] = [g for g in t["collectives"] if g["hlo_name"] == gather]
    assert g["intent"] == "reshard" and [f for f in t["findings"] if gather in (f["ops"] or [f["subject"]])]


@needs("jax_plugins.xla_cuda12", "the [gpu] extra (jax-cuda12-plugin) is not installed")
def test_a_swiglu_pair_compiled_for_h100_is_intended_as_on_cpu(cli):
    """The SwiGLU pair compiled for 8 compile-only H100 devices: XLA's GPU compiler leaves no plain dot in the
    entry (its matmuls are gemm fusions or cuBLAS calls; gate and up one matmul of the two weights side by
    side, sliced apart by the fusion that multiplies them), and the forward all-reduce adds the partial sums
    of the matmul by w['down'] (behind a cuBLAS call's result or split-K's sum), as many elements as x's
    shard. The tool on --platform h100: that sum intended, its why naming the three weights, and no SL103
    (which it reported before it read GPU's matmul forms)."""
    from jax_shard_lint.analyzer.platforms.gpu_targets import load_target, target_devices

    devices = target_devices(load_target("h100"), 8, 1)
    text = script_module(SWIGLU).shard_lint_targets(mesh_devices=devices)["train_step"].compile().as_text()
    lines = _lines(text)
    assert not re.search(r"= \S+ dot\(", text.split("\nENTRY ")[1])  # each matmul a gemm fusion or a cuBLAS call
    summed, (kind, nbytes, group, runs) = _forward_sum(text)
    assert (kind, group, runs) == ("all-reduce", 2, 1)
    down = _operands(lines[summed])[0]
    while not re.search(r"kind=kCustom|custom_call_target=\"__cublas", lines[down]):  # layout, tuple, split-K
        assert re.search(r"= \S+ (bitcast|copy|get-tuple-element|fusion)\(", lines[down]), lines[down]
        down = _operands(lines[down])[0]
    def argument(name):  # the op_name JAX gives the argument ``name`` is (its quotes escaped in the text), or None
        m = re.search(r'parameter\(\d+\).*op_name="([^"]*)"', lines[_through_layout(lines, name)])
        return m.group(1).replace("\\'", "'") if m else None

    weight, product = sorted(_operands(lines[down]), key=lambda o: argument(o) is None)
    assert argument(weight) == "w['down']" and argument(product) is None
    # silu(gate) * up of one matmul's result: x by gate and up side by side (XLA's horizontal fusion)
    [both] = _operands(lines[_through_layout(lines, product)])
    assert sorted(map(argument, _operands(lines[both]))) == ["w['gate']", "w['up']", "x"]
    [x] = [n for n, line in lines.items() if " parameter(" in line and 'op_name="x"' in line]
    assert nbytes == prod(_dims(lines[x])) * 4

    (t,) = lint_targets(cli, SWIGLU, "--platform", "h100")
    [c] = [c for c in t["collectives"] if c["hlo_name"] == summed]
    assert (c["kind"], c["bytes"], c["intent"]) == ("all-reduce", nbytes, "activation")
    for path in ("w['down'] P('model')", "w['gate'] P(None, 'model')", "w['up'] P(None, 'model')"):
        assert path in c["why"], c["why"]
    assert not [f for f in t["findings"] if f["rule"] == "SL103"]
