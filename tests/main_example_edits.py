"""The README's main example edited as a user pastes a printed fix into it, and compiled by XLA: what the
tests of its SL102 and SL105 fixes compare the fix checks' figures with."""

from scripts import script_module

# The example's last line of shard_lint_targets: a pasted with_sharding_constraint to a bare PartitionSpec
# needs the mesh in context, as the fixes say.
LOWER = '    return {"train_step": step.lower(params, opt_state, tokens)}'


def under_its_mesh(source: str) -> str:
    """The example's source with its step lowered under its mesh (jax.set_mesh)."""
    edited = source.replace(LOWER, f"    with jax.set_mesh(mesh):\n    {LOWER}")
    assert "set_mesh" in edited
    return edited


def compiled_copy(source: str, tmp_path):
    """The train step of the example's ``source`` (edited or not), written to ``tmp_path`` and compiled."""
    path = tmp_path / "fsdp_tp_train_step.py"
    path.write_text(source)
    return script_module(str(path)).shard_lint_targets()["train_step"].compile()
