"""Many resharding collectives of one cause, each under unexplained-reshard-bytes and together over it (issue 46,
cfd14 F10: jax-cfd's finite-volume solver pads its velocity periodically on the dimension the domain is split on,
63 all-to-alls of 512 KiB a step, 36.9 MiB, that were only a summary line): one SL105 finding for all of them,
naming the arguments split on their axes, with the fix (those arguments on the dimension the pad does not wrap)
compiled and printed measured better. The oracle is XLA: both layouts of the fixture compiled here, their
collectives read from ``compiled.as_text()`` and their peaks from ``memory_analysis()``."""

import json
import os
import re

from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "sl105_periodic_pad_on_split_axis.py")
_COLLECTIVE = re.compile(r"%((?:all-to-all|collective-permute|all-gather|all-reduce)[.\d]*) = ")


def _peak(compiled) -> int:
    m = compiled.memory_analysis()
    return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes


def test_a_periodic_pad_on_the_split_axis_is_one_finding_with_a_checked_move(cli, monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    module = script_module(SCRIPT)
    split_x = module.shard_lint_targets(layout="split_x")["split_x"].compile()
    split_y = module.shard_lint_targets(layout="split_y")["split_y"].compile()
    written = set(_COLLECTIVE.findall(split_x.as_text()))
    assert written and {n.split(".")[0] for n in written} == {"collective-permute"}
    assert not _COLLECTIVE.findall(split_y.as_text())  # the pad wraps x only: split on y, nothing moves

    result = cli("lint", SCRIPT, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    report = json.loads(result.out)["targets"][0]
    findings = [f for f in report["findings"] if f["rule"] == "SL105"]
    assert len(findings) == 1, findings
    [f] = findings
    assert set(f["ops"]) == written, (f["ops"], written)  # every permute XLA compiled, in one finding
    assert f["source"]["line"] == 16 and f["parameters"] == ["u", "v"], f
    assert not any("under unexplained-reshard-bytes" in w for w in report["warnings"]), report["warnings"]
    check = f["fix_check"]
    assert check["verdict"] == "better" and check["traffic_bytes_after"] == 0, check
    assert check["peak_bytes_before"] == _peak(split_x), check
    assert f["fix"].startswith("shard u and v as P(None, 'x') instead of P('x')"), f["fix"]
