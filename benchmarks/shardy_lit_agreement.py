"""``propagate`` on Shardy's own propagation test modules: does it run, and how
often does it agree with Shardy's ``sdy-propagation-pipeline`` on the values it
reports.

    python benchmarks/shardy_lit_agreement.py SHARDY_CHECKOUT [--json OUT] [--no-compile] [--show-failures]

``SHARDY_CHECKOUT`` is a checkout of openxla/shardy (its lit tests are not ours
to ship): the modules are the ``.mlir`` files of
``shardy/dialect/sdy/transforms/propagation/test``, split on ``// -----`` as
``-split-input-file`` does. Each module runs through the real command
(``jax-shard-lint propagate MODULE.mlir --format json``) in this process, and
separately through Shardy's pipeline (the oracle: a module it rejects is
counted apart). Prints the exit codes, the modules in full agreement, and the
values compared over values reported.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

TEST_DIR = "shardy/dialect/sdy/transforms/propagation/test"
_SPLIT = re.compile(r"^// -----.*$", re.M)


def modules_of(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [m for m in _SPLIT.split(f.read()) if m.strip()]


def shardy_runs(text: str) -> bool:
    from jax_shard_lint.analyzer.adapter import jax_adapter
    from jax_shard_lint.passes.propagation.shardy_reference import shardy_propagated

    try:
        shardy_propagated(jax_adapter.parse_stablehlo(text))
        return True
    except Exception:
        return False


def run_module(text: str, compile_: bool) -> tuple[int, str, dict | None]:
    from jax_shard_lint.analyzer.cli.main import run_command as main

    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "module.mlir"), os.path.join(tmp, "report.json")
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        argv = ["propagate", src, "--format", "json", "-o", out, "--all-values"]
        if not compile_:
            argv.append("--no-compile")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(argv)
        report = None
        if rc == 0 and os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                report = json.load(f)
        return rc, err.getvalue().strip(), report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shardy", help="a checkout of openxla/shardy (or the test folder itself)")
    ap.add_argument("--json", help="write per-module results here")
    ap.add_argument("--no-compile", action="store_true", help="propagate without compiling (faster)")
    ap.add_argument("--show-failures", action="store_true", help="print each non-zero exit and disagreement")
    ap.add_argument("--only", help="only files whose name contains this")
    args = ap.parse_args()
    folder = args.shardy if os.path.isfile(os.path.join(args.shardy, "basic_propagation.mlir")) \
        else os.path.join(args.shardy, TEST_DIR)
    files = sorted(f for f in os.listdir(folder) if f.endswith(".mlir") and (not args.only or args.only in f))
    exits: collections.Counter = collections.Counter()
    rows = []
    totals = collections.Counter()
    for name in files:
        for k, text in enumerate(modules_of(os.path.join(folder, name))):
            oracle = shardy_runs(text)
            rc, err, report = run_module(text, not args.no_compile)
            exits[(oracle, rc)] += 1
            row = {"file": name, "module": k, "shardy_runs": oracle, "exit": rc, "stderr": err}
            if report:
                agreement = report["targets"][0]["agreement_with_shardy"] or {}
                row.update({key: agreement.get(key) for key in ("compared", "agreeing", "reported", "fraction")})
                row["not_compared"] = agreement.get("not_compared")
                row["disagreements"] = [(d["value"], d["ours"], d["shardy"])
                                        for d in agreement.get("disagreements", [])]
                if oracle:
                    totals["modules"] += 1
                    totals["compared"] += agreement.get("compared", 0)
                    totals["agreeing"] += agreement.get("agreeing", 0)
                    totals["reported"] += agreement.get("reported", agreement.get("compared", 0))
                    totals["full"] += agreement.get("agreeing") == agreement.get("compared")
            rows.append(row)
            if args.show_failures and (rc != 0 or row.get("disagreements")):
                print(f"{name}#{k}: shardy {'runs' if oracle else 'rejects'}, exit {rc}: {err[:300]}")
                for d in row.get("disagreements", [])[:6]:
                    print(f"    {d[0]}: ours {d[1]} shardy {d[2]}")
    n = len(rows)
    print(f"modules: {n}; Shardy's pipeline runs on {sum(r['shardy_runs'] for r in rows)}")
    for (oracle, rc), count in sorted(exits.items()):
        print(f"  Shardy {'runs' if oracle else 'rejects'}: exit {rc}: {count}")
    if totals["modules"]:
        print(f"agreement where Shardy runs: {totals['full']}/{totals['modules']} modules in full; "
              f"values {totals['agreeing']}/{totals['compared']} = "
              f"{totals['agreeing'] / max(totals['compared'], 1):.2%} "
              f"(reported {totals['reported']}: {totals['agreeing'] / max(totals['reported'], 1):.2%} of them agree)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
