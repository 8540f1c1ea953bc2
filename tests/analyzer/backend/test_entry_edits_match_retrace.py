"""A fix candidate is never traced again in Python: it is lint's own StableHLO with its entry shardings and
donations edited through jaxlib's MLIR bindings (analyzer/backend/sharding_edits.py), compiled from that text.
Editing the module stands for re-tracing only where XLA compiles the two to the same program.

The oracle is JAX and XLA: the same change made the way a user makes it (the arguments' ShapeDtypeStructs given
the new shardings, ``jax.jit(..., out_shardings=..., donate_argnums=...)``), the step traced and lowered again
and compiled. On the main example, for the three kinds of entry edit lint's fix checks compile (the state inputs
given the layout the step returns them in; a move of the embedding and its moments with every state output
pinned, as suggest's single moves pin them; the donation of params and opt_state), XLA's optimized HLO
(metadata and instruction numbering aside) and ``memory_analysis()`` are the same for both."""

import difflib
import os
import re

import jax
from conftest import EXAMPLES
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

from jax_shard_lint.analyzer.adapter import jax_adapter
from jax_shard_lint.analyzer.backend.sharding_edits import with_entry_shardings
from jax_shard_lint.passes.pipelines.entry import entry_signature
from jax_shard_lint.passes.pipelines.fix_checks import FIX_CHECKS

# params and opt_state's mu and nu: 4 arrays each, in jax.tree order (embed first), then the tokens.
STATE = 12
EMBED = (0, 4, 8)


def _optimized(program) -> str:
    """The optimized HLO as two compiles of one program can be compared: XLA numbers instructions in the order
    it creates them; metadata and the stack-frame tables after the module hold the source locations (the
    re-traced step's are the test's frames); the header records the compile's propagation options (jit states
    them, a text compile leaves XLA's defaults), not the program."""
    text = program.hlo_text.split("\nFileNames", 1)[0]
    text = re.sub(r", allow_spmd_sharding_propagation_to_\w+=\{[^}]*\}", "", text)
    return re.sub(r"(%?[A-Za-z_][\w\-]*)\.\d+", r"\1", re.sub(r", metadata=\{[^}]*\}", "", text))


def _entries(sharding, rank: int) -> list[list[str]]:
    spec = tuple(sharding.spec) + (None,) * (rank - len(sharding.spec))
    return [[] if e is None else [e] if isinstance(e, str) else list(e) for e in spec]


def test_an_edited_entry_compiles_to_the_program_jit_traces_again():
    example = script_module(os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))
    lowered = example.shard_lint_targets()["train_step"]
    args = lowered.args_info[0]
    text = jax_adapter.stablehlo_text(lowered)
    module = jax_adapter.parse_stablehlo(text)
    sig = entry_signature(module, FIX_CHECKS)
    written = jax_adapter.compile_lowered(lowered, with_reports=False, optimize_machine_code=False)
    leaves, tree = jax.tree.flatten(args)
    mesh = written.output_shardings[0].mesh
    shapes = [tuple(x.shape) for x in leaves]
    written_in = written.input_shardings  # each argument's sharding as the step states it

    def retraced(moved: dict[int, NamedSharding], **jit):
        structs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=moved.get(i, written_in[i]))
                   for i, x in enumerate(leaves)]
        again = jax.jit(example.train_step, **jit).lower(*jax.tree.unflatten(tree, structs))
        return jax_adapter.compile_lowered(again, with_reports=False, optimize_machine_code=False)

    def edited(arguments: dict[int, NamedSharding], results: dict[int, NamedSharding], donors=frozenset()):
        changed = with_entry_shardings(module, {i: _entries(s, len(shapes[i])) for i, s in results.items()},
                                       sig.mesh_name, {i: _entries(s, len(shapes[i])) for i, s in arguments.items()},
                                       donors=donors)
        return jax_adapter.compile_stablehlo_text(changed, sig.num_partitions, sig.mesh.axes, sig.mesh.device_ids,
                                                  with_reports=False, optimize_machine_code=False)

    returned = {i: written.output_shardings[i] for i in EMBED}
    assert all(s.spec != written_in[i].spec for i, s in returned.items())  # SL201: it comes back otherwise
    moved = {i: NamedSharding(mesh, P("tp")) for i in EMBED}
    pinned = {i: moved.get(i, written_in[i]) for i in range(STATE)}
    state_tree = jax.tree.structure(tuple(jax.tree.unflatten(tree, leaves)[:2]))
    out_shardings = (*jax.tree.unflatten(state_tree, [pinned[i] for i in range(STATE)]), None)
    pairs = {
        "the state inputs given the layout the step returns them in": (retraced(returned), edited(returned, {})),
        "params['embed'] and its moments -> P('tp'), every state output pinned": (
            retraced(moved, out_shardings=out_shardings), edited(moved, pinned)),
        "jax.jit(..., donate_argnums=(0, 1))": (retraced({}, donate_argnums=(0, 1)),
                                                 edited({}, {}, frozenset(range(STATE)))),
    }
    for change, (again, candidate) in pairs.items():
        assert candidate.memory == again.memory, change
        assert _optimized(candidate) == _optimized(again), (change, "\n".join(difflib.unified_diff(
            _optimized(again).splitlines(), _optimized(candidate).splitlines(), lineterm="", n=1))[:3000])
    # Each edit is a change: none of them compiles to the program as written.
    assert all(candidate.memory != written.memory for _, candidate in pairs.values())
