"""The README is true: every ``jax-shard-lint`` command it shows runs, as a user runs it (from the
checkout it installed, in the README's order, every fix checked), and the report it prints under
"Reading the report" is what the main command prints. The files the commands write (``-o report.html``,
``snapshot -o shard_lint/`` and what reads it back) go to a fresh folder instead of the checkout; the
examples are read where they are, so their programs are the ones the rest of the suite compiles, read from
the run's compile memo (tests/conftest.py) where another test compiled them first.

The main command runs through the installed console script; the others run in this process
(``run_command``, the code the console script's supervised child runs): a child process each
cost a JAX start-up. tests/analyzer/cli/test_command_contract.py runs every command through
the console script.

``pip install`` and ``python -m pytest`` are CI's own first steps (``.ci/run``)."""

import os
import shlex
import subprocess

import pytest
from conftest import PINNED_JAX_RELEASE, ROOT, console_script

README = os.path.join(ROOT, "README.md")
MAIN = "jax-shard-lint lint examples/fsdp_tp_train_step.py"
ELIDED = "…"
# The files and folders the commands write, and read back, relative to where they run: given a fresh folder.
WRITTEN = ("report.html", "shard_lint/")


def _blocks(kind: str) -> list[str]:
    """The README's fenced blocks of one kind (``bash``, or ``""`` for plain ones), fence by fence."""
    blocks, current, opened = [], [], None
    with open(README, encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.startswith("```"):
                if opened is None:
                    opened, current = line[3:].strip(), []
                    continue
                if opened == kind:
                    blocks.append("\n".join(current) + "\n")
                opened = None
                continue
            current.append(line)
    return blocks


def readme_commands() -> list[str]:
    return [line.strip() for block in _blocks("bash") for line in block.splitlines()
            if line.strip().startswith("jax-shard-lint ")]


def test_the_readme_shows_every_command():
    shown = {shlex.split(c)[1] for c in readme_commands()}
    from jax_shard_lint.analyzer.cli.dispatch import COMMANDS

    assert shown == set(COMMANDS), sorted(set(COMMANDS) - shown)
    assert readme_commands()[0] == MAIN  # the set-up's second command is the main job


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path, capsys, monkeypatch):
    from jax_shard_lint.analyzer.cli.main import run_command

    # As a user runs it: every fix compiled before it is shown (the suite turns that off elsewhere).
    for name in ("JAX_SHARD_LINT_NO_FIX_CHECK", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    outputs_named = {a for c in readme_commands() for o, a in zip(shlex.split(c), shlex.split(c)[1:])
                     if o in ("-o", "--output")}
    assert outputs_named <= set(WRITTEN), outputs_named  # nothing is written into the checkout
    capsys.readouterr()
    failures, outputs = [], {}
    for command in readme_commands():
        argv = [os.path.join(tmp_path, a) if a in WRITTEN else a for a in shlex.split(command)[1:]]
        if command == MAIN:
            result = subprocess.run([console_script(), *argv], cwd=ROOT,
                                    env=dict(os.environ), capture_output=True, text=True, timeout=600)
            code, out, err = result.returncode, result.stdout, result.stderr
        else:
            code = run_command(argv)
            out, err = capsys.readouterr()
        outputs[command] = out
        if code != 0 or "Traceback" in err:
            failures.append(f"{command}: exit {code}: {err.strip()[-400:]}")
    assert not failures, "\n".join(failures)
    assert (tmp_path / "report.html").stat().st_size > 0 and (tmp_path / "shard_lint" / "baseline.json").exists()

    # The report the README reads: each line it shows is a line of the main command's output (on the
    # pinned JAX, whose figures it quotes), in the same order.
    import jax

    if ".".join(jax.__version__.split(".")[:2]) != PINNED_JAX_RELEASE:
        return
    [excerpt] = [b for b in _blocks("") if b.startswith("train_step ")]
    printed = [line.rstrip() for line in outputs[MAIN].splitlines()]
    at = 0
    for line in excerpt.splitlines():
        if line.strip() == ELIDED:
            continue
        assert line.rstrip() in printed[at:], f"the README shows a line the report does not print: {line!r}"
        at = printed.index(line.rstrip(), at) + 1
