"""A vocab-parallel embedding's lookup (fixtures/scripts/vocab_parallel_lookup.py, issue #46 after BERT's Megatron
layout): XLA finishes the gather from the table split on its rows with an all-reduce over 'model' of each device's
masked gather. The table's layout asks for that sum (smaller than the table's shard): intended traffic with that
reason, not a reshard SL105 reports. The collective and its bytes are read from XLA's compiled text."""

import json
import os
import re

from hlo_oracle import array_bytes
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "vocab_parallel_lookup.py")
_SUM = re.compile(r"= (\S+) all-reduce(?:-start)?\(.*op_name=\"([^\"]*)\"")


def test_the_all_reduce_of_a_vocab_parallel_lookup_is_its_designed_reduction(cli):
    text = script_module(SCRIPT, "_vocab_parallel_lookup").shard_lint_targets()["step"].compile().as_text()
    [(shape, _)] = [(shape, name) for shape, name in _SUM.findall(text) if name.endswith("jvp()/gather")]
    assert shape.startswith("f32[4,64,128]")

    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never",
                 "--threshold", "unexplained-reshard-bytes=16KiB")
    assert result.code == 0, result.err
    target = json.loads(result.out)["targets"][0]
    [lookup] = [c for c in target["collectives"] if c["op_name"].endswith("jvp()/gather")]
    assert lookup["kind"] == "all-reduce" and lookup["bytes"] == array_bytes(shape)
    assert lookup["intent"] == "activation", lookup
    assert lookup["why"].endswith("the designed reduction of a vocab-parallel lookup (params['emb']'s rows split on "
                                  "model, each device's gather masked to its own; the sum moves less than the "
                                  "table's shard would)"), lookup["why"]
    assert not [f for f in target["findings"] if f["rule"] == "SL105"], target["findings"]
