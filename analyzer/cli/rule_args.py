"""The arguments every analysing command takes about what the rules judge: the budget, thresholds, ignored
rules and the config file."""

from __future__ import annotations

import argparse


def add_rule_args(p: argparse.ArgumentParser) -> None:
    """The budget, thresholds, ignored rules and config file: every analysing command's."""
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget", metavar="SIZE", help="per-device memory budget, e.g. 80GiB")
    budget.add_argument("--device", metavar="KIND",
                        help="budget from a device preset: h100, h200, b200, a100-80g, a100-40g, tpu-v4, tpu-v5e, "
                        "tpu-v5p, tpu-v6e")
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                   help="override a rule threshold, e.g. --threshold replicating-collective-bytes=128MiB")
    p.add_argument("--loop-trips", type=int, default=None, metavar="N",
                   help="take each loop whose trip count XLA does not know (a data-dependent while_loop, a diffrax "
                   "solve) to run N times per run of the loops around it, never more than the bound its condition "
                   "proves: counts, bytes, step time, thresholds and sweep's ranking then use N (default: once)")
    p.add_argument("--ignore", action="append", default=[], metavar="CODE", help="disable a rule (repeatable)")
    p.add_argument("--config", metavar="PYPROJECT", help="read [tool.jax-shard-lint] from this file (default: the "
                   "nearest pyproject.toml above the script)")
