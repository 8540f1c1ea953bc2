"""``jax-shard-lint fit``: the largest value of a target parameter (a batch size,
a sequence length) whose compiled per-device peak fits the budget, by
compile-only probes.

Peaks are close to affine in such parameters, so two probes fit a line, the
line predicts the answer, and compiles verify and refine it (a secant step
through the two nearest probes, or halving the bracket when the line stops
helping) until the answer fits and the next admissible value does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from pydantic import BaseModel, Field

from ...passes.models.report import SCHEMA_VERSION, Model
from ...passes.pipelines.lint import refusal_of
from .. import __version__
from ..adapter import jax_adapter
from ..backend import compile_memo
from ..backend.cached_analysis import analysis_cache, cached, key_parts
from ..backend.script_targets import LoadedScript, load_script
from ..context.config import Settings
from ..errors import ShardLintInputError, one_line
from ..platforms.gpu_targets import ACCELERATOR_TARGETS


class Probe(Model):
    value: int
    peak_bytes: int = Field(description="XLA's per-device peak; for a probe the compiler refused, the memory "
                            "it said the program needs.")
    fits: bool
    refused_by_compiler: bool = Field(default=False, description="The compiler refused the probe for want of "
                                      "memory (a TPU compile): it does not fit.")
    target: str | None = Field(default=None, description="The target whose peak this is (the largest of the "
                               "targets at this value).")


class FitResult(Model):
    schema_version: str = SCHEMA_VERSION
    command: str = "fit"
    tool_version: str
    script: str
    param: str
    targets: list[str]
    platform: str
    budget_bytes: int
    budget_source: str | None = Field(default=None, description="The device whose memory is the budget (--device), "
                                      "or null for --budget.")
    multiple_of: int
    range: list[int]
    value: int | None = Field(description="The answer; null when even the smallest admissible value does not fit.")
    peak_bytes: int | None
    next_value: int | None = Field(description="The next admissible value, shown not to fit (null at the range's end).")
    next_peak_bytes: int | None
    line_intercept_bytes: float | None = Field(description="Peak fitted as intercept + slope x value: least squares "
                                               "over the probes from line_from_value up, every one of them within "
                                               "LINE_TOLERANCE of the line.")
    line_slope_bytes: float | None
    line_from_value: int | None = Field(default=None, description="The smallest probe the line holds for; the "
                                        "probes below it are off the line (the peak is not linear there).")
    probes: list[Probe]


@dataclass(frozen=True)
class FitRequest:
    script: str
    param: str
    targets: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    multiple_of: int = 1
    lo: int = 1
    hi: int = 65536


class ProbePeak(BaseModel):
    """One target's figures at one probe, as the analysis cache keeps them."""

    peak_bytes: int
    refused_by_compiler: bool = False


class _Prober:
    def __init__(self, request: FitRequest, script: LoadedScript, budget: int | None = None,
                 progress: Callable[[str], None] | None = None):
        self.request, self.script, self.budget = request, script, budget
        self.say = progress or (lambda _msg: None)
        self.cache: dict[int, int] = {}
        self.largest: dict[int, str] = {}  # the target whose peak is the value's
        self.refused: set[int] = set()  # values the compiler refused for want of memory
        self.order: list[int] = []
        self.names: list[str] = []

    @classmethod
    def open(cls, request: FitRequest, settings: Settings, budget: int | None = None,
             progress: Callable[[str], None] | None = None) -> _Prober:
        return cls(request, load_script(request.script, request.params, settings), budget, progress)

    def peak(self, value: int) -> int:
        if value in self.cache:
            return self.cache[value]
        self.say(f"[probe {len(self.order) + 1}] {self.request.param}={value}: compiling")
        targets = self.script.call(self.request.targets, **{self.request.param: value})
        self.names = list(targets)
        peak = 0
        settings = self.script.settings
        for name, lowered in targets.items():
            probe = self._probe(name, lowered, value, settings)
            if probe.refused_by_compiler:
                self.refused.add(value)
            if probe.peak_bytes > peak or value not in self.largest:
                peak, self.largest[value] = max(peak, probe.peak_bytes), name
        self.cache[value] = peak
        self.order.append(value)
        return self.searched_peak(value)

    def _probe(self, name: str, lowered, value: int, settings: Settings) -> ProbePeak:
        """One target's figures at one probe: from the analysis cache when this program was probed before."""
        def parts() -> dict:  # only with a cache: printing the program costs a probe without one nothing
            return key_parts("fit-probe", name, jax_adapter.stablehlo_text(lowered), settings,
                             jax_adapter.lowered_identity(lowered))

        return cached(analysis_cache(settings), parts, lambda: self._compiled_peak(name, lowered, value, settings),
                      ProbePeak)

    def _compiled_peak(self, name: str, lowered, value: int, settings: Settings) -> ProbePeak:
        try:
            # A probe is measured, never run: its CPU machine code is left unoptimized (the same peak).
            program = compile_memo.compile_lowered(lowered, settings, with_reports=False, optimize_machine_code=False)
        except Exception as e:
            refusal = refusal_of(str(e))
            if refusal is None:
                raise ShardLintInputError(self.script.where, f"target {name!r} failed to compile at "
                                          f"{self.request.param}={value}: {one_line(e)}") from e
            # A TPU compiler out of memory measured the probe: it does not fit, whatever the budget says.
            return ProbePeak(peak_bytes=refusal.required_bytes, refused_by_compiler=True)
        m = program.memory or {}
        return ProbePeak(peak_bytes=m.get("temp_bytes", 0) + m.get("argument_bytes", 0) + m.get("output_bytes", 0)
                         - m.get("alias_bytes", 0))

    def searched_peak(self, value: int) -> int:
        """The peak the search sees: a refused probe is over the budget even where the compiler's figure
        (its temporaries alone, against the HBM it can use) is not."""
        peak = self.cache[value]
        return max(peak, self.budget + 1) if value in self.refused and self.budget is not None else peak


_MAX_GROWTH = 8


def search(peak, budget: int, lo: int, hi: int, k: int) -> tuple[int | None, tuple[float, float] | None]:
    """The largest multiple of k in [lo, hi] with peak(value) <= budget, assuming
    the peak grows with the value; ``peak`` is called once per value probed."""
    first = -(-lo // k) * k
    last = hi // k * k
    if first > last:
        return None, None
    if peak(first) > budget:
        return None, None
    good, bad = first, None  # the bracket: good fits; bad (when known) does not
    second = min(last, max(first + k, (2 * first) // k * k))
    line = None
    if second > first:
        p1, p2 = peak(first), peak(second)
        slope = (p2 - p1) / (second - first)
        line = (p1 - slope * first, slope)
        if p2 <= budget:
            good = second
        else:
            bad = second
    points = sorted({first, second})
    while True:
        if bad is not None and bad - good <= k:
            return good, line
        if bad is None and good == last:
            return good, line
        # Secant through the two probes nearest the budget, clamped inside the bracket.
        near = sorted(points, key=lambda v: abs(peak(v) - budget))[:2]
        guess = None
        confirmed = False
        if len(near) == 2 and near[0] != near[1]:
            (a, pa), (b, pb) = sorted((v, peak(v)) for v in near)
            slope = (pb - pa) / (b - a)
            if slope > 0:
                guess = int((budget - pa) / slope + a) // k * k
                confirmed = _on_line(peak, points, (a, pa), slope)
        # Unbracketed, a secant through two probes of nearly equal peaks (a ViT's batch 4 and 8 both 32.0 MiB:
        # fixed costs dominate) reaches far past the answer (batch 19116, 27.5 GiB, then six halvings): it may
        # grow the largest fitting value at most _MAX_GROWTH-fold a probe, unless a third probe lies on its line.
        upper = (bad - k) if bad is not None else min(last, max(good * _MAX_GROWTH // k * k, good + k))
        if confirmed and bad is None:
            upper = last
        predicted = guess is not None and good < guess <= upper and guess not in points
        if guess is not None and bad is None and guess > upper:
            guess = upper
        if guess is None or guess <= good or guess > upper or guess in points:
            if bad is None:
                guess = min(last, good * 2 // k * k if good * 2 // k * k > good else good + k)
            else:
                guess = (good + bad) // 2 // k * k
                if guess <= good:
                    guess = good + k
        points.append(guess)
        if peak(guess) <= budget:
            good = guess
            # Verify the answer's neighbour right away when the line says this is it (not a value the growth
            # bound or a halving chose: the line puts the answer past it).
            nxt = guess + k
            if predicted and nxt <= last and (bad is None or nxt < bad):
                points.append(nxt)
                if peak(nxt) > budget:
                    bad = nxt
                else:
                    good = nxt
        else:
            bad = guess


# A probe is on the fitted line when the line predicts its peak within this fraction of it.
LINE_TOLERANCE = 0.03


def _on_line(peak, points: list[int], through: tuple[int, int], slope: float) -> bool:
    """Whether the secant's line holds: a third probe lies on it (within LINE_TOLERANCE) and the part of the
    peak that grows is at least the fixed part at the largest of them, so the line is no flat start that
    bends up later (a ViT's batch 4, 8 and 16 all near 32 MiB): its answer then needs no growth bound."""
    a, pa = through
    on = [v for v in set(points) if abs(pa + slope * (v - a) - peak(v)) <= LINE_TOLERANCE * peak(v)]
    return len(on) >= 3 and pa - slope * a <= peak(max(on)) / 2


def least_squares_line(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(intercept, slope) minimizing the squared error over the points (two distinct values at least)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def line_through_probes(peaks: dict[int, int]) -> tuple[float, float, int] | None:
    """(intercept, slope, from_value): the least-squares line over the largest probes it holds for.

    A two-probe line from the smallest values misleads: a step's fixed costs (weights, optimizer
    state, per-device constants) dominate there and the peak bends before it grows linearly, so the
    line is fitted from the largest values down, dropping the smallest probes until every remaining
    one is within LINE_TOLERANCE of it; the dropped ones are named as off the line."""
    values = sorted(peaks)
    for start in range(len(values) - 1):
        points = [(v, peaks[v]) for v in values[start:]]
        intercept, slope = least_squares_line(points)
        if all(abs(intercept + slope * v - p) <= LINE_TOLERANCE * p for v, p in points):
            return intercept, slope, values[start]
    return None


def fit(request: FitRequest, settings: Settings, progress: Callable[[str], None] | None = None) -> FitResult:
    if settings.budget_bytes is None and settings.platform not in ACCELERATOR_TARGETS:
        # An accelerator target's own memory is the budget, given when its devices are selected.
        raise ShardLintInputError("fit", "needs a budget: --budget SIZE or --device KIND (or a GPU --platform)")
    if request.multiple_of < 1 or request.lo < 1 or request.hi < request.lo:
        raise ShardLintInputError("--range", f"expected 1 <= LO <= HI, got {request.lo}:{request.hi}")
    prober = _Prober.open(request, settings, settings.budget_bytes, progress)
    settings = prober.script.settings  # resolved for the run's devices, the budget included
    budget = prober.budget = cast(int, settings.budget_bytes)
    value, _secant = search(prober.peak, budget, request.lo, request.hi, request.multiple_of)
    # The compiler's refusals measure its temporaries against the memory it can use, not the peak: off any line.
    line = line_through_probes({v: p for v, p in prober.cache.items() if v not in prober.refused})
    k = request.multiple_of
    nxt = value + k if value is not None and value + k <= request.hi // k * k else None
    from ..backend.device_selection import platform_label

    return FitResult(
        tool_version=__version__, script=request.script, param=request.param, targets=prober.names,
        platform=platform_label(settings), budget_bytes=budget,
        budget_source=settings.budget_source if settings.budget_source not in ("--budget", "config") else None,
        multiple_of=k,
        range=[request.lo, request.hi], value=value, peak_bytes=prober.cache.get(value) if value else None,
        next_value=nxt, next_peak_bytes=prober.cache.get(nxt) if nxt else None,
        line_intercept_bytes=round(line[0], 1) if line else None, line_slope_bytes=round(line[1], 3) if line else None,
        line_from_value=line[2] if line else None,
        probes=[Probe(value=v, peak_bytes=prober.cache[v], fits=prober.searched_peak(v) <= budget,
                      refused_by_compiler=v in prober.refused, target=prober.largest.get(v))
                for v in prober.order],
    )
