"""A fix candidate's rematerialization the program as written runs too is not the candidate's doing
(analyzer/backend/fix_verdicts.py: new_rematerializations), on the figures XLA gave a new user's diffrax solve
(issue 46, cfd14: diffrax 0.7.2, 64 Fisher-KPP solves of f32[64,16384], y0 P('b', None), jax 0.10.2, CPU, 8
devices). As written, XLA's compile all-gathers and all-reduces the saved solution f32[1,64,16384] whole on
every device (4 MiB each) and returns it P(); with out_shardings P('b') it keeps that all-reduce, drops the
all-gather (peak 13.0 -> 9.0 MiB), and its involuntary-rematerialization report (SL104) names the value, which
only the pin asks to reshard. lint withheld that pin, measured better on every figure, as "XLA rematerializes
with it"."""

from jax_shard_lint.analyzer.backend.fix_verdicts import new_rematerializations, rematerializations
from jax_shard_lint.passes.models.report import ArrayType, Collective, Finding, TargetReport

SAVED = [1, 64, 16384]
# SL104's message on the pinned program, as lint printed it.
PINNED_REMAT = ("XLA cannot reshard f32[1,64,16384] from P() to P(None, 'b') with a collective: it replicates the "
                "whole value on every device (4.0 MiB each) and slices it again (\"Involuntary full "
                "rematerialization\")")


def _collective(kind: str, shape: list[int], name: str) -> Collective:
    return Collective.model_construct(kind=kind, shape=shape, dtype="f32", hlo_name=name, bytes=4 << 20, count=1)


def _report(collectives: list[Collective], remats: list[str]) -> TargetReport:
    # SL104 names the value it rebuilds in rematerialized_value (what its message says, f32[1,64,16384]).
    findings = [Finding.model_construct(rule="SL104", message=m, subject="get-tuple-element", bytes=4 << 20,
                                        rematerialized_value=ArrayType(dtype="f32", shape=SAVED)) for m in remats]
    return TargetReport.model_construct(collectives=collectives, findings=findings)


def test_a_value_the_written_program_replicates_too_is_no_new_rematerialization():
    written = _report([_collective("all-gather", SAVED, "all-gather"), _collective("all-reduce", SAVED,
                                                                                   "all-reduce.2")], [])
    pinned = _report([_collective("all-reduce", SAVED, "all-reduce.2")], [PINNED_REMAT])
    assert new_rematerializations(pinned, rematerializations(written)) == []


def test_a_value_no_collective_of_the_written_program_replicates_is_new():
    # The same pin on a program that moved the solution with no collective of that value (a slice of it).
    written = _report([_collective("all-gather", [1, 64, 2048], "all-gather")], [])
    pinned = _report([_collective("all-reduce", SAVED, "all-reduce.2")], [PINNED_REMAT])
    assert new_rematerializations(pinned, rematerializations(written)) == [PINNED_REMAT]
