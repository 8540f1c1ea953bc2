"""Every fix lint prints is compiled before it is shown.

A finding's fix is a change of stated shardings: a parameter's new PartitionSpec
(SL101, SL103), or the state outputs pinned to their inputs' layouts (SL201's
out_shardings). Each is applied to the target's StableHLO (its argument or result
``sdy.sharding`` attributes; sharding_edits.py), compiled the same way as the
program as written, and compared on two figures: the per-device peak, and the
per-device traffic of a step (its collectives, plus the state the next step
reshards on entry because an output came back on another layout).

A fix that makes the step worse is not offered as the fix: the finding keeps
what it found and says what the change would cost. SL201 and SL203 are about the
same values of a step's state (a replicated input that comes back sharded): they
get one recommendation, the better of pinning the output back and giving the
input the layout the step returns it in.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...passes.common.byte_sizes import format_bytes
from ...passes.common.sharding_text import normalized, pspec_text
from ...passes.models.fix_check import FixCheck, FixVerdict
from ...passes.models.report import Finding, TargetReport, TensorInfo
from ...passes.models.rule_codes import SL101, SL103, SL201, SL203
from ...passes.stablehlo.module import EntrySignature, read_entry_signature
from ...passes.stablehlo.state_roundtrip import RoundTrip, correspond, mismatched
from ..adapter import jax_adapter
from ..context.config import Settings
from ..errors import ShardLintInputError
from ..supervision import isolation
from .cached_analysis import cached_text_report
from .checked_in_analysis import analyze_text
from .sharding_edits import with_entry_shardings

# Fixes compiled per target: each costs a compile of the whole step.
MAX_CHECKS = 4
_PARAMETER_FIXES = (SL101.code, SL103.code)
# Figures within this share of each other are the same (XLA's choices move a few buffers around).
_NOISE = 0.005


@dataclass(frozen=True)
class _Candidate:
    change: str
    arguments: dict[int, list[list[str]]]
    results: dict[int, list[list[str]]]


def traffic_bytes(report: TargetReport, sig: EntrySignature) -> int:
    """Per-device bytes a step moves: its collectives, and the state outputs the next step reshards."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    entry = sum(rt.output.per_device_bytes for rt in mismatched(correspond(compiled)))
    return sum(c.bytes * c.count for c in report.collectives) + entry


def _matcher(pattern: str) -> re.Pattern[str]:
    """A parameter pattern (``h[*]``) as a regex over argument paths."""
    return re.compile(re.escape(pattern).replace(re.escape("[*]"), r"\[(?:'\d+'|\"\d+\"|\d+)\]") + "$")


def _parameter_candidate(f: Finding, inputs: list[TensorInfo]) -> _Candidate | None:
    """The finding's new sharding for every argument its parameters name (each layer), and for the
    optimizer state that mirrors them (same key path under another argument, same shape and layout)."""
    if f.parameter is None or f.suggested_sharding is None or f.parameter_sharding is None:
        return None
    edits: dict[int, list[list[str]]] = {}
    for parameter in f.parameters or [f.parameter]:
        whole = _matcher(parameter)
        keys = parameter[parameter.find("["):] if "[" in parameter else parameter
        mirror = _matcher(keys)
        named = [t for t in inputs if whole.match(t.path)]
        if not named:
            return None
        shapes = {tuple(t.shape) for t in named}
        before = normalized(f.parameter_sharding, len(named[0].shape))
        edits.update({t.index: f.suggested_sharding for t in inputs
                      if (whole.match(t.path) or (mirror.search(t.path) and tuple(t.shape) in shapes))
                      and normalized(t.sharding, len(t.shape)) == before})
    named_text = ", ".join(f.parameters or [f.parameter])
    return _Candidate(f"{named_text} -> {pspec_text(f.suggested_sharding)}", edits, {}) if edits else None


def _state_candidates(report: TargetReport, sig: EntrySignature) -> tuple[_Candidate | None, _Candidate | None]:
    """(pin the state outputs to their inputs' layouts, give the inputs the layouts they come back in)."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    moved = mismatched(correspond(compiled))
    if not moved:
        return None, None
    pin = _Candidate("out_shardings pinning every state output to its input's layout",
                     {}, {rt.output.index: rt.input.sharding or [] for rt in moved})
    take = _Candidate("in_shardings giving each state input the layout the step returns it in",
                      {rt.input.index: rt.output.sharding or [] for rt in moved}, {})
    return pin, take


def _compiled(name: str, text: str, sig: EntrySignature, settings: Settings, where: str,
              devices: list) -> TargetReport:
    """A version's report, compiled from its text (through the analysis cache)."""
    return cached_text_report(name, text, sig.num_partitions, settings, devices,
                              lambda: analyze_text(name, text, settings, where, devices=devices)[0])


def _verdict(peak: tuple[int, int], traffic: tuple[int, int]) -> FixVerdict:
    def change(before: int, after: int) -> int:
        if abs(after - before) <= _NOISE * max(before, 1):
            return 0
        return 1 if after > before else -1

    dp, dt = change(*peak), change(*traffic)
    if dp == dt == 0:
        return FixVerdict.no_change
    if dp <= 0 and dt <= 0:
        return FixVerdict.better
    if dp >= 0 and dt >= 0:
        return FixVerdict.worse
    return FixVerdict.trade_off


def _cost_text(check: FixCheck) -> str:
    if check.verdict is FixVerdict.failed:
        return f"does not compile ({check.error})"

    def signed(n: int) -> str:
        return ("+" if n > 0 else "-" if n < 0 else "±") + format_bytes(abs(n))

    return f"peak {signed(check.peak_delta)}, traffic {signed(check.traffic_delta)} per step per device"


def check_fixes(report: TargetReport, text: str, settings: Settings, where: str, devices: list,
                progress: Callable[[str], None] | None = None) -> TargetReport:
    """The report with each fix compiled: its ``fix_check`` set, and a fix that makes the step
    worse (or does not compile) reworded to say what it costs instead of being offered.
    ``progress`` is told of each compile, counted ("[2/5] ...")."""
    module = jax_adapter.parse_stablehlo(text)
    sig = read_entry_signature(module)
    pin, take = _state_candidates(report, sig)
    wanted = [f for f in report.findings if f.rule in _PARAMETER_FIXES and f.suggested_sharding is not None]
    state_rules = {SL201.code, SL203.code}
    # The suggested out_shardings are checked even where SL201 is ignored: the text is printed either way.
    if not wanted and not report.suggested_out_shardings and not any(f.rule in state_rules for f in report.findings):
        return report
    if not wanted and pin is None:
        return report
    isolation.phase(where, "compiling the findings' fixes to check them")
    inputs = list(report.inputs)
    # The candidates the loop below reads, in its order: the first MAX_CHECKS parameter fixes, then the two
    # state candidates where that leaves room for both. Each is independent of the others, so the program
    # as written and every candidate compile side by side (XLA releases the GIL while it compiles).
    planned = [c for f in report.findings if f.rule in _PARAMETER_FIXES
               for c in [_parameter_candidate(f, inputs)] if c is not None][:MAX_CHECKS]
    if pin is not None and take is not None and MAX_CHECKS - len(planned) >= 2:
        planned += [pin, take]
    texts = [text] + [with_entry_shardings(module, c.results, sig.mesh_name or "mesh", c.arguments) for c in planned]
    labels = ["the program as written"] + [c.change for c in planned]
    compiled = _compile_side_by_side(
        [lambda t=t: _compiled(report.name, t, sig, settings, where, devices) for t in texts],
        _counted(progress, report.name, labels))
    before = compiled[0]
    if isinstance(before, BaseException):
        raise before
    base = (before.memory.peak_bytes if before.memory else 0, traffic_bytes(before, sig))
    after_of = {id(c): compiled[k + 1] for k, c in enumerate(planned)}
    budget = MAX_CHECKS

    def run(c: _Candidate) -> FixCheck:
        nonlocal budget
        budget -= 1
        after = after_of[id(c)]
        if isinstance(after, ShardLintInputError):
            return FixCheck(change=c.change, verdict=FixVerdict.failed, peak_bytes_before=base[0],
                            traffic_bytes_before=base[1], error=str(after).split(": ", 1)[-1][:300])
        if isinstance(after, BaseException):
            raise after
        peak = after.memory.peak_bytes if after.memory else 0
        traffic = traffic_bytes(after, sig)
        return FixCheck(change=c.change, verdict=_verdict((base[0], peak), (base[1], traffic)),
                        peak_bytes_before=base[0], peak_bytes_after=peak, traffic_bytes_before=base[1],
                        traffic_bytes_after=traffic)

    findings = list(report.findings)
    parameter_checks = iter(planned)
    for k, f in enumerate(findings):
        candidate = _parameter_candidate(f, inputs) if f.rule in _PARAMETER_FIXES else None
        if candidate is None or budget <= 0:
            continue
        check = run(next(parameter_checks))
        findings[k] = _with_check(f, check, f.fix or "")
    if pin is not None and take is not None and budget >= 2:
        pinned = run(pin)
        findings = _state_advice(findings, pinned, run(take), _moved_state(report, sig))
        if pinned.verdict in (FixVerdict.worse, FixVerdict.failed) and report.suggested_out_shardings:
            return report.model_copy(update={
                "findings": findings, "suggested_out_shardings": None,
                "warnings": [*report.warnings, "the out_shardings= pinning every state output was compiled and "
                             f"is not offered: {_cost_text(pinned)}"]})
    return report.model_copy(update={"findings": findings})


def _compile_side_by_side(jobs: list[Callable[[], TargetReport]],
                          done: Callable[[], None]) -> list[TargetReport | BaseException]:
    """Each job's report, or what it raised, in the jobs' order; up to one compile per core at a time."""
    if len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return [_outcome(job, done) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), thread_name_prefix="fix-check") as pool:
        return list(pool.map(lambda job: _outcome(job, done), jobs))


def _outcome(job: Callable[[], TargetReport], done: Callable[[], None]) -> TargetReport | BaseException:
    try:
        return job()
    except Exception as e:  # handed to the loop that reads the outcomes in order, which raises or reports it
        return e
    finally:
        done()


def _counted(progress: Callable[[str], None] | None, name: str, labels: list[str]) -> Callable[[], None]:
    """Told of each compile as it finishes: "[2/5] NAME: fix checks compiled" on ``progress``."""
    finished = 0
    lock = threading.Lock()
    if progress is not None:
        progress(f"[0/{len(labels)}] {name}: compiling {len(labels)} programs to check the fixes: "
                 + "; ".join(labels))

    def done() -> None:
        nonlocal finished
        with lock:
            finished += 1
            if progress is not None:
                progress(f"[{finished}/{len(labels)}] {name}: fix checks compiled")

    return done


def _moved_state(report: TargetReport, sig: EntrySignature) -> dict[str, RoundTrip]:
    """Output path and input path -> each state value that comes back on another layout."""
    compiled = dataclasses.replace(sig, inputs=tuple(report.inputs), outputs=tuple(report.outputs))
    out: dict[str, RoundTrip] = {}
    for rt in mismatched(correspond(compiled)):
        out[rt.output.path] = out[rt.input.path] = rt
    return out


def _with_check(f: Finding, check: FixCheck, fix: str) -> Finding:
    if check.verdict in (FixVerdict.better, FixVerdict.no_change, FixVerdict.trade_off):
        lead = "trade-off: " if check.verdict is FixVerdict.trade_off else ""
        return f.model_copy(update={"fix_check": check, "fix": f"{lead}{fix} (checked: {_cost_text(check)})"})
    return f.model_copy(update={
        "fix_check": check, "suggested_sharding": None,
        "fix": f"no sharding change found that helps: {check.change} was compiled and "
               f"{'costs ' + _cost_text(check) if check.verdict is FixVerdict.worse else _cost_text(check)}"})


def _state_advice(findings: list[Finding], pin: FixCheck, take: FixCheck, moved: dict[str, RoundTrip],
                  ) -> list[Finding]:
    """One recommendation for the state values SL201 and SL203 are about."""
    rank = {FixVerdict.better: 0, FixVerdict.no_change: 1, FixVerdict.trade_off: 2, FixVerdict.worse: 3,
            FixVerdict.failed: 4}

    def score(c: FixCheck) -> tuple[int, int]:
        return rank[c.verdict], (c.peak_delta + c.traffic_delta)

    best = min((pin, take), key=score)
    other = take if best is pin else pin
    out = []
    for f in findings:
        if f.rule not in (SL201.code, SL203.code):
            out.append(f)
            continue
        rt = moved.get(f.subject or "")
        if f.rule == SL203.code and rt is None:
            out.append(f)  # a replicated input that comes back as it went: SL203's own advice stands
            continue
        if best.verdict in (FixVerdict.worse, FixVerdict.failed):
            text = (f"neither fix helps this step: pinning the outputs costs {_cost_text(pin)}; giving the inputs "
                    f"the returned layout costs {_cost_text(take)}")
            out.append(f.model_copy(update={"fix": text, "fix_check": best}))
            continue
        if best is take and f.count == 1 and rt is not None:
            what = f"shard {rt.input.path} as {pspec_text(rt.output.sharding)}, the layout the step returns it in"
        elif best is take:  # a group of values (SL201's small outputs): each takes its returned layout
            what = ("give the state inputs the layouts the step returns them in (in_shardings=, or place them "
                    "there with jax.device_put)")
        else:
            what = "pin the state outputs to their inputs' layouts (the target's suggested out_shardings=)"
        lead = "trade-off: " if best.verdict is FixVerdict.trade_off else ""
        text = (f"{lead}{what} (checked with every state value alike: {_cost_text(best)}; the other way, "
                f"{'pinning the outputs' if best is take else 'taking the returned layouts'}, {_cost_text(other)})")
        out.append(f.model_copy(update={"fix": text, "fix_check": best}))
    return out
