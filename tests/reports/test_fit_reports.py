"""fit's reports (terminal, JSON) on one small result built here."""

from __future__ import annotations

from report_samples import (
    HOSTILE,
    MiB,
    assert_inert_terminal,
    json_round_trip,
    render_terminal,
)

from jax_shard_lint.analyzer.commands.fit import FitResult, Probe


def result(value: int | None = 8) -> FitResult:
    probes = [Probe(value=4, peak_bytes=3 * MiB, fits=True, target="step"),
              Probe(value=16, peak_bytes=9 * MiB, fits=False),
              Probe(value=8, peak_bytes=5 * MiB, fits=True),
              Probe(value=12, peak_bytes=7 * MiB, fits=False, refused_by_compiler=True)]
    return FitResult(tool_version="9.9.9", script="train.py", param=f"batch{HOSTILE}", targets=["step"],
                     platform="cpu", budget_bytes=6 * MiB, budget_source="h100", multiple_of=4, range=[4, 16],
                     value=value, peak_bytes=5 * MiB if value else None, next_value=12 if value else None,
                     next_peak_bytes=7 * MiB if value else None, line_intercept_bytes=float(MiB),
                     line_slope_bytes=float(MiB // 2), probes=probes if value else probes[1:2])


def test_terminal():
    text = render_terminal("fit", result())
    assert f"Probes of batch{HOSTILE} (in the order compiled)" in text  # the table's title is markup: as written
    assert f"batch{HOSTILE} = 8: peak 5.000 MiB; batch{HOSTILE}=12 needs 7.000 MiB" in text
    assert (f"fitted line (least squares over the 3 probes batch{HOSTILE}=4..16): peak ~ 1.000 MiB + 0.500 MiB "
            f"x batch{HOSTILE}") in text
    assert "budget 6.000 MiB per device (cpu)" in text and "a multiple of 4 in 4..16" in text
    assert "no (the compiler refused it: out of memory)" in text
    assert "these peaks are a CPU compile's, measured against the h100's memory" in text


def test_terminal_names_the_probes_off_the_line():
    text = render_terminal("fit", result().model_copy(update={"line_from_value": 8}), width=400)
    assert (f"fitted line (least squares over batch{HOSTILE}=8 and batch{HOSTILE}=16): peak ~ 1.000 MiB + 0.500 MiB "
            f"x batch{HOSTILE}; not linear below batch{HOSTILE}=8: batch{HOSTILE}=4 measured 3.000 MiB") in text


def test_terminal_when_nothing_fits():
    text = render_terminal("fit", result(value=None))
    assert f"no admissible batch{HOSTILE} fits: the smallest already needs 9.000 MiB" in text


def test_terminal_shows_names_as_written():
    text = render_terminal("fit", result())
    assert f"batch{HOSTILE} = 8: peak 5.000 MiB" in text
    assert_inert_terminal(text)


def test_json():
    out = json_round_trip("fit", result())
    assert out["value"] == 8 and [p["value"] for p in out["probes"]] == [4, 16, 8, 12]


def test_terminal_writes_a_peak_near_the_budget_finely_enough_to_compare():
    # newcomer13's BERT (megatron, mesh 4x2, jax 0.10.2 CPU): XLA's peak at batch=172 was 1025.3 MiB against a
    # 1 GiB budget; written as "1.0 GiB" it read as equal to the budget it exceeds.
    GiB = 1024 * MiB
    near = result().model_copy(update={
        "budget_bytes": GiB, "value": 168, "peak_bytes": int(1003.1 * MiB), "next_value": 172,
        "next_peak_bytes": int(1025.3 * MiB),
        "probes": [Probe(value=168, peak_bytes=int(1003.1 * MiB), fits=True),
                   Probe(value=172, peak_bytes=int(1025.3 * MiB), fits=False),
                   Probe(value=4, peak_bytes=int(123.5 * MiB), fits=True)]})
    text = render_terminal("fit", near, width=400)
    assert f"batch{HOSTILE}=172 needs 1,025.3 MiB (budget 1,024.0 MiB)" in text
    assert "= 168: peak 1,003.1 MiB;" in text  # already in MiB: nothing to add
    # One unit in the table and every line (cfd14 F8, moe14 F7: "1.1 GiB" above "1,055.0 MiB").
    assert "123.5 MiB" in text and "budget 1,024.0 MiB per device" in text and "GiB" not in text


def test_terminal_names_the_target_that_binds():
    # moe14 F7 (XLA, jax 0.10.2 CPU): at group_size 3072 dmodel_sharded's peak was 966.1 MiB, expert_parallel's
    # less; at 3328 dmodel_sharded needed 1,055.0 MiB where expert_parallel's 959.0 MiB fit.
    several = result().model_copy(update={
        "targets": ["dmodel_sharded", "expert_parallel"], "param": "group_size", "budget_bytes": 1024 * MiB,
        "value": 3072, "peak_bytes": int(966.1 * MiB), "next_value": 3328, "next_peak_bytes": int(1055.0 * MiB),
        "probes": [Probe(value=3072, peak_bytes=int(966.1 * MiB), fits=True, target="dmodel_sharded"),
                   Probe(value=3328, peak_bytes=int(1055.0 * MiB), fits=False, target="dmodel_sharded"),
                   Probe(value=256, peak_bytes=int(300.0 * MiB), fits=True, target="expert_parallel")]})
    text = render_terminal("fit", several, width=400)
    assert ("group_size = 3072: peak 966.1 MiB (dmodel_sharded, the largest); group_size=3328 needs 1,055.0 MiB "
            "(budget 1,024.0 MiB) (dmodel_sharded, the target that binds)") in text
    assert "largest of the targets" in text and "expert_parallel" in text
    assert "KiB" not in text and "GiB" not in text


def test_the_probes_title_is_one_line_in_a_100_column_terminal():
    # A newcomer's fit of rows (polish18 F7c): the table of short figures is 36 columns wide, and its title,
    # drawn as the table's, wrapped at them: "Probes of rows (in the order" / "compiled)".
    probes = [Probe(value=v, peak_bytes=v * MiB // 4, fits=v <= 16) for v in (8, 16, 24)]
    fitted = result().model_copy(update={"param": "rows", "probes": probes})
    lines = render_terminal("fit", fitted, width=100).splitlines()
    assert "Probes of rows (in the order compiled)" in [line.strip() for line in lines]
    assert all(len(line.rstrip()) <= 100 for line in lines)
