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
