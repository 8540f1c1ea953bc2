"""A finding's long pytree paths at 100 and 130 columns: lines break between words and before a
``['key']``, never inside a quoted key (newcomer12 found ``['kerne`` / ``l']`` in a ViT's fix), and no
line is wider than the terminal."""

import pytest
from report_samples import HEADER, at, render_terminal

from jax_shard_lint.passes.models.report import Finding, LintReport, Severity

PATHS = [f"opt_state[0].mu['vit']['encoder']['layer']['{i}']['attention']['attention']['{k}']['kernel']"
         for i in range(3) for k in ("key", "query", "value")]
FIX = "shard " + ", ".join(PATHS) + " as P() instead of P('model')"


@pytest.mark.parametrize("width", [100, 130])
def test_long_paths_break_before_a_key_never_inside_one(width):
    finding = Finding(rule="SL103", name="partial-sum-from-weight", severity=Severity.warning,
                      message="all-reduce over model adds partial sums", source=at(56), fix=FIX,
                      parameter="params['vit']['encoder']['layer'][*]['intermediate']['dense']['kernel']",
                      parameter_sharding=[["model"], []], suggested_sharding=[[], []],
                      provenance=["argument " + PATHS[0] + " is P('model', None)"])
    text = render_terminal("lint", LintReport(**HEADER, command="lint", targets=[], findings=[finding]), width=width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    fix_lines = [line.strip() for line in lines if "opt_state" in line or "['" in line]
    for line in fix_lines:  # every key on a line is whole: quotes pair up, no bracket is left alone
        assert line.count("'") % 2 == 0 and not line.startswith("]"), line
    # Joined at its breaks the fix is the text written: nothing lost, nothing cut inside a key.
    start = next(i for i, line in enumerate(lines) if "fix:" in line)
    block = [lines[start].split("fix:", 1)[1].strip()]
    for line in lines[start + 1:]:
        if not line.strip() or ":" in line.split()[0]:
            break
        block.append(line.strip())
    assert "".join(block).replace(" ", "") == FIX.replace(" ", "")


def test_rows_mostly_at_one_line_keep_their_op_column_at_100_columns():
    """A ViT's 47 collectives were all at its model call but one (a gather with no line): at 100 columns
    the op column was left out, and nothing on the rows told the layers apart."""
    from test_findings_reports import report

    base = report("lint")
    target = base.targets[0]
    one = target.collectives[0]
    rows = [one.model_copy(update={"op_name": f"jit(step)/vit/encoder/layer/{i}/attention/dot_general",
                                   "hlo_name": f"all-reduce.{i}", "source": at(56), "via": None})
            for i in range(5)] + [one.model_copy(update={"source": None, "via": None, "hlo_name": "all-gather.9"})]
    text = render_terminal("lint", base.model_copy(update={"targets": [target.model_copy(
        update={"collectives": rows})]}), width=100)
    header = next(line for line in text.splitlines() if "kind" in line and "bytes" in line)
    assert " op " in header, header
    assert all(f"layer/{i}" in text for i in range(5)), text
