"""Write the whole-report goldens for the JAX release this Python runs (tests/golden/ for the pinned
release, tests/golden/jax-X.Y/ for another), each the output of the command tests/golden_reports.py gives
it, in the tests' environment (tests/conftest.py: 8 virtual CPU devices, no fix checks; no analysis cache). The
tests never write a golden; run this after a deliberate change of the output, once per JAX release:

    python3 tests/golden/generate.py [NAME ...]
    VENV312/bin/python tests/golden/generate.py            # a Python 3.12 environment with the newest JAX

and check the numbers with tests/reports/test_golden_numbers.py."""

import contextlib
import io
import os
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TESTS)

import conftest  # noqa: E402  (configures JAX as the tests do, before it initialises)

# Every golden is compiled here, never read from an analysis cache (the suite's run shares one; this has none).
os.environ["JAX_SHARD_LINT_NO_CACHE"] = "1"
from golden_reports import GOLDENS, golden_text  # noqa: E402


def render(name: str) -> str:
    from jax_shard_lint.analyzer.cli.main import run_command

    args, columns, _ = GOLDENS[name]
    before = os.environ.get("COLUMNS")
    if columns is not None:
        os.environ["COLUMNS"] = str(columns)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = run_command(list(args))
        if code not in (0, 1):  # 1: findings at the failing severity, which the goldens show
            raise SystemExit(f"generate.py: {name}: jax-shard-lint {' '.join(args)} exited {code}")
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return golden_text(name, out.getvalue())


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in GOLDENS]
    if unknown:
        print(f"generate.py: no golden named {', '.join(unknown)} (known: {', '.join(GOLDENS)})", file=sys.stderr)
        return 2
    os.chdir(conftest.ROOT)
    folder = conftest.golden_dir()
    os.makedirs(folder, exist_ok=True)
    for name in names or list(GOLDENS):
        with open(os.path.join(folder, name), "w") as f:
            f.write(render(name))
        print(os.path.relpath(os.path.join(folder, name), conftest.ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
