"""A collective XLA inserts to return an output on the layout the jit call's out_shardings states is at the
jit call's line, the user's line that asks for it (as SL201's and SL202's findings are), with a why naming
the output and its stated layout: XLA gives it no line (jax 0.10) or its operand's metadata (jax 0.12), and
lint once reported it as a finding with no source at all (a new user's ViT, issue 46: ``SL101 [warning] -``).
The oracle is XLA: the op is the all-gather in ``compiled.as_text()``, its bytes XLA's."""

import json
import os

from conftest import FIXTURES
from hlo_oracle import compiled_collectives
from scripts import script_module

SCRIPT = os.path.join(FIXTURES, "scripts", "out_shardings_gather.py")


def test_gathers_out_shardings_ask_for_are_at_the_jit_line_with_each_output_named(cli):
    result = cli("lint", SCRIPT, "--no-fix-check", "--threshold", "replicating-collective-bytes=1MiB",
                 "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [t] = json.loads(result.out)["targets"]
    with open(SCRIPT) as fh:
        jit_line = next(n for n, text in enumerate(fh.read().splitlines(), 1) if "jax.jit(forward" in text)

    compiled = script_module(SCRIPT).shard_lint_targets()["gathered_output"].compile()
    xla = {name: v for name, v in compiled_collectives(compiled.as_text(), 8).items() if v[0] == "all-gather"}
    assert len(xla) == 2 and all(b == 64 * 8192 * 4 for _, b, _ in xla.values())  # each output's batch shard

    [f] = t["findings"]
    assert f["rule"] == "SL101" and sorted(f["ops"]) == sorted(xla) and f["count"] == 2, f
    assert f["source"]["file"].endswith("out_shardings_gather.py") and f["source"]["line"] == jit_line, f["source"]
    assert f["via"] is None and f["bytes"] == sum(b for _, b, _ in xla.values())
    assert sorted(f["provenance"]) == [
        f"XLA inserts it to return result['{name}'] as P('data'), the layout the jit call's out_shardings states "
        "for it (the step computes it sharded over model)" for name in ("hidden", "logits")]
    assert sorted(c["hlo_name"] for c in t["collectives"]) == sorted(xla)
    assert all(c["source"]["line"] == jit_line for c in t["collectives"])
