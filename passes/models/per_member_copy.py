"""A buffer live at the peak that is a parameter copied per member of a vmapped batch: the model
``LiveBuffer.per_member_copy`` holds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..common.pytree_paths import argument_name


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PerMemberCopy(_Model):
    """A buffer that is one copy of a parameter per member of a vmapped batch: its shape is a parameter's
    per-device shape with one dimension more (a vmap's batch of a gradient closed over, not batched)."""

    members: int = Field(description="Copies: the size of the dimension vmap added.")
    dims: list[int] = Field(description="Where in the buffer's shape that dimension may be: one place, or each "
                            "place the shape leaves open (a [64,128,64] buffer is 64 x [128,64] or [64,128] x 64).")
    parameters: list[str] = Field(description="Every parameter (or optimizer state) whose per-device shape and "
                                  "element type the buffer is, with one of those dimensions, in argument order.")

    def __str__(self) -> str:
        """``256 x params.w's per-device shape (a per-member copy from vmap)``: the parameters whose optimizer
        state the others mirror (``opt_state[0].mu.w`` of ``params.w``) named."""
        return (f"{self.members} x {' or '.join(p + chr(39) + 's' for p in self.named())} per-device shape "
                "(a per-member copy from vmap)")

    def named(self) -> list[str]:
        """The parameters but those that mirror another (an optimizer's moments of a parameter)."""
        return [p for p in self.parameters if not any(_mirrors(p, q) for q in self.parameters)]


def _mirrors(path: str, other: str) -> bool:
    """Whether ``path`` is optimizer state that mirrors the parameter ``other``: another argument's leaf whose keys
    end with all of ``other``'s below its argument (``opt_state[0].mu.mlp.w`` of ``params.mlp.w``)."""
    below = other[len(argument_name(other)):]
    return bool(below) and argument_name(path) != argument_name(other) and path.endswith(below)
