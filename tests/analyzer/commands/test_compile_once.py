"""A program two fix checks arrive at is compiled once per target (analyzer/backend/side_by_side.py's
``one_compile_per_program``), and the solver fixes' single moves compile while the restricted solve
runs: the fixes, their figures and the report are what compiling every candidate on its own gives.

On the main example every fix candidate is compiled once: the state fixes, the donations, SL203's second
choice (params['embed'] and its moments -> P(('fsdp', 'tp'))) and the solver fixes' single moves and
layouts. The oracle for "compiled once" is the text handed to XLA: every compile of a fix candidate is
counted by its StableHLO text. The compiles per lint of the main example and of value_function_step, by
stage of the fix-check pipeline, are read from the compile log (JAX_SHARD_LINT_COMPILE_LOG) and held to
those XLA was handed: a change that compiles more (or less) for either fails here. SL203's second choice,
once both state fixes are measured no better, compiles beside the donations still compiling, as the progress
lines show."""

import json
import os
import re
import threading
import time
from collections import Counter

import jax
import pytest
from conftest import EXAMPLES

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend import compile_memo, side_by_side
from jax_shard_lint.analyzer.backend.advice import solver_fixes
from jax_shard_lint.analyzer.backend.sharding_edits import with_entry_shardings
from jax_shard_lint.passes.pipelines.entry import entry_signature
from jax_shard_lint.passes.pipelines.fix_checks import FIX_CHECKS


def test_once_computes_a_key_once_inside_the_scope_and_every_time_outside():
    calls = Counter()

    def job(key):
        def run():
            calls[key] += 1
            time.sleep(0.05)  # the second caller arrives while the first computes
            if key == "bad":
                raise ValueError("rejected")
            return key.upper()
        return run

    assert [side_by_side.once("a", job("a")) for _ in range(2)] == ["A", "A"]
    assert calls["a"] == 2  # no scope: nothing is shared
    results = {}
    with side_by_side.one_compile_per_program():
        threads = [threading.Thread(target=lambda k=k: results.setdefault(k, side_by_side.once("b", job("b"))))
                   for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(2):
            with pytest.raises(ValueError, match="rejected"):
                side_by_side.once("bad", job("bad"))
    assert results == {0: "B", 1: "B", 2: "B"} and calls["b"] == 1 and calls["bad"] == 1
    side_by_side.once("b", job("b"))
    assert calls["b"] == 2  # the scope is over


def _compile_log(path) -> tuple[Counter, Counter]:
    """(compiles of StableHLO by stage, candidates measured on a program compiled before by stage) in the compile
    log; every compile of StableHLO is of a program no other compile in it had (its key)."""
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    compiled = [line for line in lines if line["memo"] == "off" and line["entry"] == "stablehlo"]
    assert len({line["key"] for line in compiled}) == len(compiled)
    assert all(line["memo"] in ("off", "same", "stage") for line in lines)
    return (Counter(line.get("stage") for line in compiled),
            Counter(line.get("stage") for line in lines if line["memo"] == "same"))


@pytest.mark.slow  # over 30 s on 2 cores: lint's compile, ten fix candidates and two programs compared
def test_main_example_compiles_each_fix_candidate_once(cli, monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    monkeypatch.setenv(compile_memo.COMPILE_LOG_ENV, str(tmp_path / "compiles.jsonl"))
    compiled = Counter()
    # What XLA returned for each text lint compiled, with the call: the oracle below reads the first program of a
    # pair from it where lint compiled it exactly as the oracle does (no second compile of that program).
    programs = {}
    real = jax_adapter.compile_stablehlo_text

    def counting(text, *args, **kwargs):
        compiled[text] += 1
        programs[text] = (args, kwargs, real(text, *args, **kwargs))
        return programs[text][2]

    monkeypatch.setattr(jax_adapter, "compile_stablehlo_text", counting)
    # Lint's StableHLO, each candidate's entry edit by its report, and each candidate not compiled with the edit
    # of the one whose report it took.
    texts, edits, reused = [], {}, []
    real_text, real_remember, real_same = jax_adapter.stablehlo_text, side_by_side.remember, solver_fixes.same_program

    def text(lowered):
        texts.append(real_text(lowered))
        return texts[-1]

    def remember(edit, report):
        edits[id(report)] = edit
        real_remember(edit, report)

    def same_program(edit):
        same = real_same(edit)
        if same is not None:
            reused.append((edit, edits[id(same)]))
        return same

    monkeypatch.setattr(jax_adapter, "stablehlo_text", text)
    monkeypatch.setattr(side_by_side, "remember", remember)
    monkeypatch.setattr(solver_fixes, "same_program", same_program)
    result = cli("lint", os.path.join(EXAMPLES, "fsdp_tp_train_step.py"), "--no-cache", "--format", "json",
                 "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    assert compiled and max(compiled.values()) == 1, sorted(compiled.values())
    # The layout the step returns the embedding and its moments in, pinned there, is the program of the state fix
    # that gives the state inputs the layout the step returns them in: not compiled again (side_by_side.
    # same_program; on jax 0.12 the solver's layout, SL203's second choice, is one too, the same text). The
    # oracle is XLA: both programs of each such pair whose texts differ, compiled for the fix check (the one lint
    # compiled is its call's result, the other compiled here alike), give the same memory figures and the same
    # optimized HLO, instruction numbers aside.
    assert "not compiled, the same program as one compiled before: params['embed'] and 2 more -> P(None, 'tp')" \
        in result.err
    module = jax_adapter.parse_stablehlo(texts[0])
    sig = entry_signature(module, FIX_CHECKS)

    def program_text(e):
        return with_entry_shardings(module, {i: [list(d) for d in s] for i, s in e.results}, sig.mesh_name,
                                    {i: [list(d) for d in s] for i, s in e.arguments}, donors=e.donors)

    def optimized(program):
        return re.sub(r"(%?[A-Za-z_][\w\-]*)\.\d+", r"\1", re.sub(r"metadata=\{[^}]*\}", "", program.hlo_text))

    pairs = [(program_text(a), program_text(b)) for a, b in reused]
    assert any(a != b for a, b in pairs), pairs
    oracle_call = ((sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids),
                   {"with_reports": False, "optimize_machine_code": False})

    def compiled_here(t):
        args, kwargs, program = programs.get(t, ((), {}, None))
        kwargs = dict(kwargs)
        devices = kwargs.pop("devices", None)
        if program is not None and (args, kwargs) == oracle_call and (
                devices is None or [d.id for d in devices[:sig.num_partitions]] ==
                [d.id for d in jax.devices()[:sig.num_partitions]]):
            return program  # lint's compile of this text, the same call as below
        return real(t, *oracle_call[0], **oracle_call[1])

    for pair in {pair for pair in pairs if pair[0] != pair[1]}:
        first, second = (compiled_here(t) for t in pair)
        assert first.memory == second.memory and optimized(first) == optimized(second)
    # SL203's second choice (both mesh axes on the embedding's rows) and the solver fixes' move 0, each announced.
    second = "params['embed'], opt_state['mu']['embed'], opt_state['nu']['embed'] -> P(('fsdp', 'tp'))"
    assert second in result.err and "-> P('fsdp') (returned in that layout) (move 0)" in result.err
    # The two state fixes, the SL202 donations (params, opt_state, both together) compiled as candidates of
    # their own, and one compile per distinct layout of the embedding announced (SL203's second choice, the
    # solver fixes' single moves and their layout; the layout the step returns them in is the state fix's
    # program): on jax 0.12 the solver's layout is SL203's second choice, one program two checks arrive at.
    assert "compiled jax.jit(..., donate_argnums=(0,))" in result.err
    assert "compiled jax.jit(..., donate_argnums=(1,))" in result.err
    assert "compiled params['embed'] and 2 more -> P(None, 'tp')" not in result.err
    # A label too long for a progress line names its first path and how many more (side_by_side.shortened).
    moved = re.findall(r"compiled params\['embed'\](?:, opt_state\['mu'\]\['embed'\], opt_state\['nu'\]\['embed'\]| "
                       r"and 2 more) -> (P\(.*?\))(?: \(returned in that layout\))? \(", result.err)
    assert len(set(moved)) >= 4, moved
    # 3 donations: params, opt_state, both in one jit; and the step with the tokens replicated, which checks that
    # their sharding takes part in SL102's and SL105's collectives (the other side of the conflict: conflict_checks).
    # SL105's gathered activation (the mixer's output split on tp): its candidates, shared by its three findings,
    # each compiled once (a constraint on that output moved or dropped, the weight's axis moved or dropped).
    [target] = json.loads(result.out)["targets"]
    split = {json.dumps(c, sort_keys=True) for f in target["findings"] if f["rule"] == "SL105" for c in f["candidates"]}
    assert len(split) == 4 and "compiled the output of the matmul by params['layers']['mix']" in result.err
    # SL102's FSDP fix: the down projection's weight gathered in the layer (loop_weight_gathers.py), one compile.
    assert "compiled params['layers']['down']'s slice gathered in the loop body at line 31 -> P('tp')" in result.err
    # suggest's three baseline versions of the whole step (replicated, data-parallel, FSDP), which the solver fixes
    # compile once per target (advice/baselines.py: one advisor, issue 46).
    baselines = 3
    assert len(compiled) == 2 + 3 + len(set(moved)) + 1 + len(split) + 1 + baselines
    # The compile log says the same, by stage: lint's own compile of the jitted step, the conflict check (the
    # tokens replicated), the state fixes, the donations and SL203's second choice, the solver fixes' versions
    # (moves 0 to 2, the returned layout and the solver's, those that are a program compiled before logged as
    # "same": the returned layout; on jax 0.12 the solver's too, SL203's second choice), SL105's four, SL102's one.
    by_stage, same = _compile_log(tmp_path / "compiles.jsonl")
    assert sum(by_stage.values()) == len(compiled)
    solver = 5 + baselines - same["solver-fixes"]
    assert by_stage == {"conflict-check": 1, "parameter-fixes": 2 + 3 + 1, "solver-fixes": solver,
                        "stated-layout-fixes": len(split), "loop-weight-gathers": 1}, by_stage
    assert 1 <= same["solver-fixes"] <= 2 and set(same) == {"solver-fixes"}, same
    if (os.cpu_count() or 1) > 1:
        # Neither state fix is measured better, so SL203's second choice starts compiling as soon as both are
        # compiled, beside the donations, not after them (fix_checks._second_choices).
        lines = result.err.splitlines()
        asked = next(k for k, line in enumerate(lines) if "to check a second choice" in line)
        assert asked < next(k for k, line in enumerate(lines) if "compiled jax.jit(..., donate_argnums=(0, 1))" in line)
    checks = [f["fix_check"] for f in target["findings"] if f["rule"] in ("SL201", "SL203")]
    assert checks and all(c["verdict"] == "better" and "(move 2)" in c["change"] for c in checks)


def test_value_function_step_compiles_each_fix_candidate_once(cli, monkeypatch, tmp_path):
    """Lint of value_function_step (two targets, --no-cache): each target's own compile, then sharded_on_grid's
    three candidates (SL101's move of v_next, the two state fixes) and sharded_on_states' one (the donation),
    each compiled once, counted at XLA and in the compile log alike."""
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    monkeypatch.setenv(compile_memo.COMPILE_LOG_ENV, str(tmp_path / "compiles.jsonl"))
    handed: Counter = Counter()
    for name in ("compile_lowered", "compile_stablehlo_text"):
        real = getattr(jax_adapter, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            handed[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(jax_adapter, name, counted)
    result = cli("lint", os.path.join(EXAMPLES, "value_function_step.py"), "--no-cache", "--format", "json",
                 "--fail-on", "never")
    assert result.code == 0, result.err[-2000:]
    assert handed == {"compile_lowered": 2, "compile_stablehlo_text": 4}, handed
    by_stage, same = _compile_log(tmp_path / "compiles.jsonl")
    assert by_stage == {"parameter-fixes": 4} and not same, (by_stage, same)
    lowered = [json.loads(line) for line in open(tmp_path / "compiles.jsonl", encoding="utf-8")
               if '"lowered"' in line]
    assert len(lowered) == 2 and all("stage" not in line for line in lowered)
    # Each fix-check stage of each target logs its cost when it ends: its wall seconds and the process's CPU
    # seconds over them (the CPU the parameter fixes spend compiling the target's candidates is in theirs).
    stages = [json.loads(line) for line in open(tmp_path / "compiles.jsonl", encoding="utf-8")
              if '"memo": "stage"' in line]
    assert Counter(line["stage"] for line in stages) == {
        s: 2 for s in ("parameter-fixes", "single-move-rivals", "solver-fixes", "stated-layout-fixes",
                       "loop-weight-gathers", "idle-batch-axes", "unattributed-reshards", "fft-fixes")}, stages
    assert all(line["cpu"] >= 0 and line["seconds"] >= 0 for line in stages)
    assert all(line["cpu"] > 0 for line in stages if line["stage"] == "parameter-fixes")
