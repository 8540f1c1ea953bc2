"""SL103's fix moves a tensor-parallel pair together (issue 46: a newcomer's Flax ViT, its MLP's intermediate
kernel on the dimension it contracts and its output dense on the dimension it produces; moving the first alone
measured a trade-off). On fixtures/scripts/mlp_pair_mistakes.py lint prints the pair: the up projection onto
the dimension it produces, the down projection onto the one it contracts, each with its moments. XLA is the
oracle: the PartitionSpecs the fix prints, written into the step by hand and compiled with
``jax.jit(...).lower(...).compile()``, give the figures the fix prints (``memory_analysis()``'s peak, the
collectives of the compiled text), and they are better than the step as written. The down projection's
backward all-reduce of its whole input gradient, which XLA compiles because it is sharded on its output
features, is one of the finding's ops, named in its message."""

import os
import re

import jax
from conftest import FIXTURES
from fix_oracle import better, fixed, lint_findings, measured
from hlo_oracle import collectives_per_step
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "mlp_pair_mistakes.py")


def _printed_spec(fix: str, path: str) -> P:
    """The PartitionSpec the fix text gives ``path`` (``shard X as P(...)``, ``together with X P(...) as P(...)``)."""
    m = re.search(re.escape(path) + r"(?: P\([^)]*\))? as (P\([^)]*\))", fix)
    assert m, (path, fix)
    return eval(m.group(1), {"P": P})


def test_lint_prints_the_pair_fix_and_xla_measures_its_figures(cli, monkeypatch):
    module = script_module(SCRIPT)
    fn, options, args = module.step_and_inputs()
    written, as_written = measured(fn, options, args, 2)
    target = lint_findings(cli, monkeypatch, SCRIPT, (), ())
    [f] = [f for f in target["findings"] if f["rule"] == "SL103"]
    check = f["fix_check"]
    assert check["verdict"] == "better", f["fix"]
    assert "(checked: " in f["fix"] and "row-parallel" in f["fix"]
    up, down = f["parameter"], f["candidates"][0]["together"][0]["value"]
    assert up.endswith("['up']") and down.endswith("['down']"), (up, down)
    # The printed specs, pasted into the step by hand: every layer the finding names.
    col, row = _printed_spec(f["fix"], up), _printed_spec(f["fix"], down)
    assert (col, row) == (P(None, "model"), P("model")), (col, row)
    m = args[0]["0"]["up"].sharding.mesh
    by_hand = (module.layout(m, up=P("model", None), down=P(None, "model")),) + args[1:]
    layer = re.search(r"\['(\d+)'\]", up).group(1)
    params = {k: ({"up": module.spec(m, module.layout(m)["0"]["up"].shape, col),
                   "down": module.spec(m, module.layout(m)["0"]["down"].shape, row)} if k == layer else v)
              for k, v in by_hand[0].items()}
    state = {name: {k: params[k] if k == layer else v for k, v in tree.items()} for name, tree in args[1].items()}
    after = measured(fn, options, (params, state, args[2]), 2)[1]
    assert (check["peak_bytes_before"], check["traffic_bytes_before"]) == as_written
    assert (check["peak_bytes_after"], check["traffic_bytes_after"]) == after
    assert better(as_written, after), (as_written, after)
    # The change text rebuilt by the shared oracle gives the same figures.
    assert fixed(check["change"], fn, options, args, 2, written) == after


def test_the_down_projections_backward_sum_is_the_findings(cli, monkeypatch):
    fn, options, args = script_module(SCRIPT).step_and_inputs()
    text = jax.jit(fn, **options).lower(*args).compile().as_text()
    per_step = collectives_per_step(text, 8)
    lines = {m.group(1): m.group(0) for m in re.finditer(r"^\s*(?:ROOT )?%([\w.\-]+) = .*$", text, re.M)}
    # XLA's backward all-reduces of an f32[16,128,1024] (the down projection's input gradient) over model.
    backward = {n for n, c in per_step.items() if c[0] == "all-reduce" and c[2] == 2
                and "f32[16,128,1024]" in lines[n].split("all-reduce(")[0] and "transpose(" in lines[n]}
    assert backward, sorted(per_step)
    target = lint_findings(cli, monkeypatch, SCRIPT, ("--no-fix-check",), ())
    [f] = [f for f in target["findings"] if f["rule"] == "SL103"]
    claimed = set(f["ops"]) & backward
    assert claimed, (f["ops"], sorted(backward))
    assert "backward pass all-reduces that matmul's whole input gradient" in f["message"]
    assert f["candidates"][0]["together"][0]["value"] in f["message"]
