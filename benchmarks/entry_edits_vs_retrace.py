"""Every fix candidate lint compiles that changes only the entry (argument shardings, pinned result shardings,
donations) is lint's StableHLO edited through jaxlib's MLIR bindings (analyzer/backend/sharding_edits.py), never a
re-trace. This checks, for every such candidate of one lint, that XLA compiles the edited text to the program JAX
gives when the same change is made the way a user makes it (the arguments' ShapeDtypeStructs given the new
shardings, ``jax.jit(..., out_shardings=..., donate_argnums=...)``, traced, lowered and compiled again): the same
``memory_analysis()`` figures and the same optimized HLO (metadata, instruction numbering and the header's
propagation options aside, as tests/analyzer/backend/test_entry_edits_match_retrace.py compares them).

    python benchmarks/entry_edits_vs_retrace.py [--example fsdp_tp_train_step.py:train_step ...]

Each example is ``FILE:FUNCTION``, the function its targets jit. Candidates that edit the body (a sharding
constraint inserted or changed) are counted and not compared: a re-trace would need the user's code changed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["fsdp_tp_train_step.py:train_step", "value_function_step.py:bellman_step"]
_BODY_EDITS = ("constraints", "inserted", "casts", "staged", "staged_results", "undonated")


def _optimized(hlo_text: str) -> str:
    text = hlo_text.split("\nFileNames", 1)[0]
    text = re.sub(r", allow_spmd_sharding_propagation_to_\w+=\{[^}]*\}", "", text)
    return re.sub(r"(%?[A-Za-z_][\w\-]*)\.\d+", r"\1", re.sub(r", metadata=\{[^}]*\}", "", text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", nargs="*", default=EXAMPLES)
    parser.add_argument("--devices", type=int, default=8)
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import importlib.util

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_shard_lint.analyzer.adapter import jax_adapter
    from jax_shard_lint.analyzer.backend import sharding_edits
    from jax_shard_lint.passes.pipelines.entry import entry_signature
    from jax_shard_lint.passes.pipelines.fix_checks import FIX_CHECKS

    recorded: list[tuple[tuple, str, dict]] = []
    real = sharding_edits.with_entry_shardings

    signature = inspect.signature(real)

    def recording(*given, **named):
        text = real(*given, **named)
        edit = signature.bind(*given, **named).arguments
        sig = entry_signature(edit["module"], FIX_CHECKS)
        written = tuple(repr(t.sharding) for t in sig.inputs)
        recorded.append((written, text, {"results": dict(edit["shardings"]),
                                         "arguments": dict(edit.get("arguments") or {}),
                                         "donors": edit.get("donors", frozenset()),
                                         "body": any(edit.get(k) for k in _BODY_EDITS)}))
        return text

    # Before the modules that import it by name.
    sharding_edits.with_entry_shardings = recording
    from jax_shard_lint.analyzer.cli.main import run_command

    failures = 0
    for example in args.example:
        name, function = example.split(":")
        script = os.path.join(ROOT, "examples", name)
        recorded.clear()
        with tempfile.TemporaryDirectory() as out:
            code = run_command(["lint", script, "--devices", str(args.devices), "--no-cache", "--format", "json",
                                "--fail-on", "never", "-q", "-o", os.path.join(out, "r.json")])
        assert code in (0, 1), code
        spec = importlib.util.spec_from_file_location(name[:-3], script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for target, lowered in module.shard_lint_targets().items():
            text = jax_adapter.stablehlo_text(lowered)
            sig = entry_signature(jax_adapter.parse_stablehlo(text), FIX_CHECKS)
            written_key = tuple(repr(t.sharding) for t in sig.inputs)
            mine = [(t, e) for w, t, e in recorded if w == written_key]
            leaves, tree = jax.tree.flatten(lowered.args_info[0])
            out_leaves, out_tree = jax.tree.flatten(lowered.out_info)
            # Each argument's sharding as the step states it (an ArgInfo holds none): the compiled step's.
            written_in = list(jax_adapter.compile_lowered(lowered, with_reports=False,
                                                          optimize_machine_code=False).input_shardings)
            mesh = written_in[0].mesh

            def named(entries, mesh=mesh):
                return NamedSharding(mesh, P(*[None if not e else e[0] if len(e) == 1 else tuple(e)
                                               for e in entries]))

            tops = [len(jax.tree.leaves(a)) for a in lowered.args_info[0]]
            starts = [sum(tops[:k]) for k in range(len(tops))]
            seen: set[str] = set()
            for text_edited, edit in mine:
                key = jax_adapter.text_without_locations(text_edited)
                if key in seen:
                    continue
                seen.add(key)
                label = (f"args {sorted(edit['arguments'])} results {sorted(edit['results'])} "
                         f"donors {sorted(edit['donors'])}")
                if edit["body"]:
                    print(f"{name} {target}: body edit, not compared: {label}", flush=True)
                    continue
                donors = sorted(edit["donors"])
                argnums = tuple(k for k, (s, n) in enumerate(zip(starts, tops))
                                if n and set(range(s, s + n)) <= set(donors))
                if sum(tops[k] for k in argnums) != len(donors):
                    print(f"{name} {target}: donation of part of an argument, not compared: {label}", flush=True)
                    continue
                structs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=named(edit["arguments"][i])
                                                if i in edit["arguments"] else written_in[i])
                           for i, x in enumerate(leaves)]
                outs = jax.tree.unflatten(out_tree, [named(edit["results"][i]) if i in edit["results"] else None
                                                     for i in range(len(out_leaves))])
                jit_kwargs = {"donate_argnums": argnums} if argnums else {}
                if edit["results"]:
                    jit_kwargs["out_shardings"] = outs
                again = jax.jit(getattr(module, function), **jit_kwargs).lower(*jax.tree.unflatten(tree, structs))
                retraced = jax_adapter.compile_lowered(again, with_reports=False, optimize_machine_code=False)
                candidate = jax_adapter.compile_stablehlo_text(
                    text_edited, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids, with_reports=False,
                    optimize_machine_code=False)
                same_memory = candidate.memory == retraced.memory
                same_hlo = _optimized(candidate.hlo_text) == _optimized(retraced.hlo_text)
                failures += not (same_memory and same_hlo)
                print(f"{name} {target}: {'same' if same_memory and same_hlo else 'DIFFERENT'} "
                      f"(memory {'=' if same_memory else '!='}, optimized HLO {'=' if same_hlo else '!='}; "
                      f"temp {candidate.memory['temp_bytes']:,} B): {label}", flush=True)
    print(f"jax {jax.__version__}: {failures} candidate(s) differ from the re-traced compile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
