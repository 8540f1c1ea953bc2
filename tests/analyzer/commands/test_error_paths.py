"""equinox's error_if (diffrax, optimistix and lineax check every solve with it) lowers to a conditional whose
failing branch calls back to the host and broadcasts the callback's result from device 0. A diffrax step's report
counted that broadcast as a resharding all-reduce and raised an SL101 on it, though it runs only when the check
fails; and raised a second SL101, with a generic fix, on the gather the passing branch makes of the checked
value, which the SL201 finding's pinned out_shardings removes. The branches are read here from XLA's compiled
text: the collectives of the branch that calls back to the host are error-path, the gather is SL201's."""

import json
import os
import re

import jax
from conftest import FIXTURES
from jax.sharding import NamedSharding
from scripts import script_module

from jax_shard_lint.passes.common.byte_sizes import format_bytes

SCRIPT = os.path.join(FIXTURES, "scripts", "sl201_error_if_checked_state.py")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$")
_COLLECTIVE = re.compile(r"%(\S+) = \S+ (all-reduce|all-gather)(?:-start)?\(")


def _computations(text: str) -> dict[str, str]:
    out, name, lines = {}, None, []
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            name, lines = m.group(1), []
        elif line == "}" and name:
            out[name] = "\n".join(lines)
            name = None
        elif name:
            lines.append(line)
    return out


def _calls_host(comps: dict[str, str], name: str, depth: int = 0) -> bool:
    body = comps.get(name, "")
    return "callback" in body and "custom_call_target=" in body or depth < 4 and any(
        _calls_host(comps, callee, depth + 1) for callee in re.findall(r"_computation=%([\w.\-]+)", body))


def _xla_branches(compiled_text: str) -> tuple[set[str], set[str]]:
    """(the collectives in the branch of the check's conditional that calls back to the host, those in the
    other branch), by the conditional XLA names branched_error_if_impl."""
    comps = _computations(compiled_text)
    conds = [line for body in comps.values() for line in body.splitlines()
             if " conditional(" in line and "error_if" in line and "branch_computations=" in line]
    assert len(conds) == 1, conds
    branches = re.findall(r"%([\w.\-]+)", conds[0].split("branch_computations={", 1)[1].split("}", 1)[0])
    failing = [b for b in branches if _calls_host(comps, b)]
    assert len(failing) == 1 and len(branches) == 2, branches

    def collectives(name):
        own = set(_COLLECTIVE.findall(comps[name]))
        return {n for n, _ in own}
    passing = [b for b in branches if b not in failing]
    return collectives(failing[0]), collectives(passing[0])


def test_the_failing_branch_is_error_path_and_the_passing_gather_is_sl201s(cli):
    lowered = script_module(SCRIPT).shard_lint_targets()["checked"]
    compiled = lowered.compile()
    failing, passing = _xla_branches(compiled.as_text())
    assert failing and passing  # XLA's broadcast in one branch, its gather of the checked value in the other

    report = json.loads(cli("lint", SCRIPT, "--format", "json", "-q", "--fail-on", "never").out)
    target = report["targets"][0]
    intents = {c["hlo_name"]: c["intent"] for c in target["collectives"]}
    assert {n for n, i in intents.items() if i == "error-path"} == failing
    assert all(intents[n] == "reshard" for n in passing)
    assert [f["rule"] for f in target["findings"]] == ["SL201"]
    assert passing <= set(target["findings"][0]["ops"])
    # A step that succeeds never runs the failing branch: its broadcast is timed, and left out of the step's.
    time = target["time"]
    step = sum(c["seconds"] for c in target["collectives"] if c["intent"] != "error-path")
    assert abs(time["communication_seconds"] - step) <= 0.01 * step
    assert any("error-path" in note for note in time["notes"])
    # The summary counts the step's traffic without the failing branch's, and says what it left out.
    sizes = {c["hlo_name"]: c["bytes"] * c["count"] for c in target["collectives"]}
    summary = " ".join(cli("lint", SCRIPT, "--no-fix-check", "--fail-on", "never").out.split())
    counted, left = (sum(b for n, b in sizes.items() if n not in failing), sum(sizes[n] for n in failing))
    assert (f"{len(sizes)} ops, {format_bytes(counted)} per step per device ({len(failing)} only when a runtime "
            f"check fails ({format_bytes(left)}), not counted)") in summary, summary

    # The pin SL201 stands for: XLA compiles the step with its output on the input's layout without the gather,
    # and the failing branch's broadcast stays.
    m = script_module(SCRIPT)
    pinned_text = _pinned(m).compile().as_text()
    pinned_failing, pinned_passing = _xla_branches(pinned_text)
    assert not pinned_passing and len(pinned_failing) == len(failing)


def _pinned(m):
    """The fixture's step with out_shardings pinning the state to its input's layout."""
    mesh = m.mesh()
    y = m.spec(mesh, (64, 8192), m.P("data"))
    return jax.jit(m.step, out_shardings=NamedSharding(mesh, m.P("data"))).lower(y)
