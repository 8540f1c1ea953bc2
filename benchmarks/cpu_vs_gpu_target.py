"""Per example: per-device peak and collective bytes when compiled for the
virtual CPU devices and for an H100 target (no GPU needed), side by side.

    python benchmarks/cpu_vs_gpu_target.py [--platform h100]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["fsdp_tp_train_step.py", "value_function_step.py", "remat_layer_stack.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default="h100")
    args = parser.parse_args()

    from jax_shard_lint.analyzer.commands.lint import LintRequest, lint
    from jax_shard_lint.analyzer.context.config import Settings
    from jax_shard_lint.passes.common.byte_sizes import format_bytes

    rows = []
    for name in EXAMPLES:
        path = os.path.join(ROOT, "examples", name)
        cpu = lint(LintRequest(path), Settings(platform="cpu"))
        gpu = lint(LintRequest(path), Settings(platform=args.platform))
        for c, g in zip(cpu.targets, gpu.targets):
            kinds = lambda t: ", ".join(sorted({x.kind for x in t.collectives})) or "-"  # noqa: E731
            rows.append((f"{name[:-3]}:{c.name}", c.memory.peak_bytes, g.memory.peak_bytes,
                         sum(x.bytes * x.count for x in c.collectives), sum(x.bytes * x.count for x in g.collectives),
                         kinds(c), kinds(g)))
    print(f"| target | peak cpu | peak {args.platform} | ratio | collectives cpu | collectives {args.platform} | "
          f"kinds cpu | kinds {args.platform} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, pc, pg, cc, cg, kc, kg in rows:
        print(f"| {name} | {format_bytes(pc)} | {format_bytes(pg)} | {pc / pg:.2f}x | {format_bytes(cc)} | "
              f"{format_bytes(cg)} | {kc} | {kg} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
