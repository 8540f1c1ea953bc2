"""One lowered target analysed, through the analysis cache: compiled by XLA (``program_facts``: the one
builder of CompiledFacts), its StableHLO's entry read on a second thread meanwhile (the lint pipeline's first
stage), then the lint pipeline run (``passes/pipelines/lint.py``, which runs the propagation behind a finding's
provenance only when a finding asks for it).
"""

from __future__ import annotations

import dataclasses
import threading

from ...passes.models.memory_stats import MemoryStats
from ...passes.models.report import TargetReport
from ...passes.pipelines.inputs import CompiledFacts
from ...passes.pipelines.lint import (
    ConflictCheck,
    analyze_refused_target,
    analyze_target,
    read_entry,
    refusal_of,
)
from ..adapter import jax_adapter
from ..cache.cache_key import cache_key
from ..context.config import Settings
from ..context.display_paths import display_source
from ..errors import ShardLintInputError, one_line
from . import compile_memo
from .cached_analysis import analysis_cache, cached_report, key_parts
from .device_selection import device_processes, platform_label
from .jit_call_findings import at_jit_calls
from .out_shardings import suggest as suggest_out_shardings


def compiled_facts(lowered, platform: str, settings: Settings, text: str | None = None) -> CompiledFacts:
    # The executable is read, never run: its CPU machine code is left unoptimized (the same figures,
    # about half the compile; analyzer/adapter/compiling.py), and it comes from the compile memo where the
    # analysis cache is on.
    program = compile_memo.compile_lowered(lowered, settings, optimize_machine_code=False, text=text)
    facts = program_facts(program, platform, [len(a.shape) for a in _flat_avals(lowered.out_info)],
                          [len(a.shape) for a in _flat_avals(lowered.in_avals)], device_processes(lowered))
    return dataclasses.replace(facts, donated_inputs=jax_adapter.donated_argument_leaves(lowered))


def program_facts(program: jax_adapter.CompiledProgram, platform: str, output_ranks: list[int],
                  input_ranks: list[int] | None, processes: tuple[int, ...] | None = None) -> CompiledFacts:
    """The one builder of CompiledFacts from an XLA executable (a jitted target's, or
    checked-in StableHLO's); ``run`` builds its own from XLA's dump files."""
    return CompiledFacts(
        hlo_text=program.hlo_text,
        platform=platform,
        memory=MemoryStats(**program.memory) if program.memory else None,
        live_range_text=program.live_range_text,
        buffer_assignment_text=program.buffer_assignment_text,
        output_shardings=tuple(
            jax_adapter.sharding_axes(s, rank) for s, rank in zip(program.output_shardings, output_ranks)
        ) or None,
        input_shardings=None if input_ranks is None else tuple(
            jax_adapter.sharding_axes(s, rank) for s, rank in zip(program.input_shardings, input_ranks)
        ) or None,
        device_processes=processes,
        xla_cost=program.cost,
        compiler_warnings=program.compiler_warnings,
    )


def _flat_avals(tree):
    import jax

    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))


class _Background:
    """A pass run on another thread while XLA compiles (XLA's compile releases the
    GIL): reading the StableHLO's entry signature costs no wall time there."""

    def __init__(self, fn, *args):
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self.thread.start()

    def _run(self, fn, *args):
        try:
            self.result = fn(*args)
        except Exception as e:  # reported when the result is asked for
            self.error = e

    def get(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def _stablehlo_entry(text: str, ownership):
    """What the StableHLO alone tells, on a copy of the module in a context of its
    own (the compile on the main thread uses the original's): the entry signature
    and source lines, and the copy itself, for the propagation behind a finding's
    provenance."""
    module = jax_adapter.parse_stablehlo(text)
    return module, read_entry(module, ownership)


def analyze_lowered(name: str, lowered, settings: Settings, where: str,
                    meets: ConflictCheck | None = None, figures_only: bool = False) -> TargetReport:
    """The target's report: from the analysis cache when this program was analysed before
    with the same settings and compilers, else compiled and analysed (and stored). ``meets``: lint's check
    of a why chain from another argument (conflict_checks.py), which compiles; None: no such chain.
    ``figures_only``: the caller reads the report's figures only (snapshot's baseline)."""
    text, cache = jax_adapter.stablehlo_text(lowered), analysis_cache(settings)

    def parts(checked: bool) -> dict:
        return {**key_parts("lowered", name, text, settings, jax_adapter.lowered_identity(lowered)),
                "conflict_checked": checked}

    # lint's report (its other-side chains checked by compiling) serves snapshot, which reads its figures only,
    # as it is. Never a report that is shown: lint without its fix checks would print the chains or not by
    # what the cache held (the README's main example at 80 columns, in one CI run and not another).
    checked = meets is not None or (figures_only and cache is not None and cache.has(cache_key(parts(True))))
    # The jit call's line is read from the script as it is now, outside the cache: the program's
    # locations do not name it (moving it changes no StableHLO).
    return at_jit_calls(cached_report(cache, lambda: parts(checked),
                                      lambda: _analyze_lowered(name, lowered, text, settings, where, meets)))


def _analyze_lowered(name: str, lowered, text: str, settings: Settings, where: str,
                     meets: ConflictCheck | None = None) -> TargetReport:
    module = jax_adapter.stablehlo_module(lowered)
    label, config = platform_label(settings), settings.pass_config
    ownership = config.ownership  # the settings' one (Settings.ownership is made once per configuration)
    background = _Background(_stablehlo_entry, text, ownership)
    try:
        facts = compiled_facts(lowered, label, settings, text)
    except Exception as e:  # XLA rejects the program: the user's input, not our bug
        refusal = refusal_of(str(e))
        if refusal is None:
            raise ShardLintInputError(where, f"target {name!r} failed to compile: {one_line(e)}") from e
        _, entry = background.get()  # out of memory on the device: a measurement, reported as a finding
        return analyze_refused_target(name, module, refusal, label, config, entry)

    def out_shardings_hook(inputs, outputs, roundtrips):
        s = suggest_out_shardings(lowered, inputs, outputs, roundtrips)
        return s.text, s.problem

    copy, entry = background.get()
    return analyze_target(name, module, facts, config, out_shardings_hook, entry,
                          explain_with=copy, display=display_source, meets=meets)
