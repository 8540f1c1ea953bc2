"""One transfer per async chain: the pieces XLA splits one collective into, joined and counted once.

XLA runs a collective asynchronously as a chain of steps. In open XLA the chain is explicit: an
``async-start`` (or ``all-gather-start``, ``collective-permute-start``...), any number of
``async-update`` steps and an ``async-done``, all on one wrapped computation (XLA's
``async_collective_creator``; the GPU prints these). Only the start is the collective: the updates
and the done wait on the transfer the start began, so the start's executions are the transfers.

TPU's compiler goes further and splits the collective itself (libtpu's async collective fusion):
a start fusion (``async-collective-start``), continuation fusions (``backend_config`` with
``continuation_config``, calling ``async_collective_fusion.N``) interleaved with compute, and a done
fusion (``async-collective-done``), each holding a clone of the one collective with its channel id
and full result shape, and the chain's ``chain_id`` in its frontend attributes. A continuation can
sit inside a loop the start is outside of (the logits weight's gather of a llama step runs its
continuations inside the layer scan): it runs once per iteration, yet the chain moves the array
once per execution of its start. So the pieces are one transfer, counted as often as its start
runs (the done's count when no start piece is found).
"""

from __future__ import annotations

from .module import HloModule

START, CONTINUATION, DONE = "start", "continuation", "done"


def async_role(module: HloModule, computation: str) -> str | None:
    """The step of an async chain a computation is the body of, or None when no async step calls it."""
    for caller in module.callers().get(computation, []):
        if caller.opcode in ("async-start", "async-update", "async-done"):
            return {"async-start": START, "async-update": CONTINUATION, "async-done": DONE}[caller.opcode]
        if caller.opcode != "fusion":
            continue
        if "continuation_config" in caller.attr_text or computation.startswith("async_collective_fusion"):
            return CONTINUATION
        if caller.name.startswith("async-collective-start"):
            return START
        if caller.name.startswith("async-collective-done"):
            return DONE
    return None


def chain_id(attr_text: str) -> str | None:
    """The ``chain_id`` frontend attribute libtpu gives every piece of one chain."""
    marker = 'chain_id="'
    at = attr_text.find(marker)
    if at < 0:
        return None
    end = attr_text.find('"', at + len(marker))
    return attr_text[at + len(marker):end] if end > 0 else None
