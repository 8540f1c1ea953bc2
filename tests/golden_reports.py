"""The whole-report goldens (tests/golden/, tests/golden/jax-X.Y/): the command each is the output of.
tests/golden/generate.py writes them; the tests only compare (tests/reports/test_reports.py,
tests/passes/source/test_attribution.py), and tests/reports/test_golden_numbers.py checks the numbers in
them against XLA compiling the same programs."""

import os
import re

from conftest import ROOT

VALUE = os.path.join("examples", "value_function_step.py")
FSDP = os.path.join(ROOT, "examples", "fsdp_tp_train_step.py")

# name -> (the command's arguments, COLUMNS or None, whether versions and paths are blanked)
GOLDENS: dict[str, tuple[tuple[str, ...], int | None, bool]] = {
    "value_function.sarif": (("lint", VALUE, "--format", "sarif", "-q"), None, True),
    "value_function.md": (("lint", VALUE, "--format", "markdown", "-q"), None, True),
    "value_function.json": (("lint", VALUE, "--format", "json", "-q"), None, True),
    "fsdp_terminal_80.txt": (("lint", FSDP, "-q", "--fail-on", "never"), 80, False),
    "fsdp_terminal_120.txt": (("lint", FSDP, "-q", "--fail-on", "never"), 120, False),
}


def blank(text: str) -> str:
    """Versions and machine paths out, so goldens compare on any machine."""
    text = re.sub(r'("(?:tool_|jax_|jaxlib_)?version": )"[^"]*"', r'\1"X"', text)
    text = re.sub(r"jax(lib)? \d+\.\d+\.\d+", r"jax\1 X", text)
    return text.replace(ROOT + os.sep, "")


def golden_text(name: str, out: str) -> str:
    """What the golden file holds for the command's output."""
    return blank(out) if GOLDENS[name][2] else out
