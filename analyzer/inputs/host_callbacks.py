"""One line for a step that calls back to the host, lowered for a compile-only GPU target.

JAX lowers ``jax.pure_callback``, ``io_callback`` and ``jax.debug.callback`` through the target's own
backend (``emit_python_callback`` asks the lowering context for it), and a compile-only GPU target has
none here (libtpu's compile-only TPU devices lower it): JAX raises "Unknown backend: 'gpu' requested, but
no platforms ... are present", which reads as if the script were wrong. equinox adds such callbacks for
its runtime checks (``eqx.error_if``, and so diffrax's ``diffeqsolve``, also with ``throw=False``);
``EQX_ON_ERROR=nan`` lowers those checks without one (a newcomer's diffrax step, newbie16 F3)."""

from __future__ import annotations

import os
import re
import traceback

_UNKNOWN_BACKEND = re.compile(r"Unknown backend: '(\w+)'")
_CALLBACK_FRAME = os.path.join("jax", "_src", "callback.py")


def host_callback_problem(exc: BaseException) -> str | None:
    """The one-line problem for a host callback JAX could not lower without the target's backend; None for
    anything else. The callback's own line is in the traced program, not on this stack (the lowering's): the
    line the error names is the script's call that lowered the step."""
    m = _UNKNOWN_BACKEND.search(str(exc))
    if m is None or not any(f.filename.endswith(_CALLBACK_FRAME) for f in _frames(exc)):
        return None
    return ("the step calls back to the host (jax.pure_callback, io_callback or jax.debug.callback), which JAX "
            f"lowers only where the target's backend is present, and a compile-only {m.group(1).upper()} target "
            "has none here: lint it on the CPU (no --platform), or leave the callback out of the step (equinox's "
            "and diffrax's runtime checks, eqx.error_if, are such callbacks: EQX_ON_ERROR=nan lowers them "
            "without one)")


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``exc`` and of the exceptions it was raised from or during (JAX may re-raise)."""
    out: list[traceback.FrameSummary] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out.extend(traceback.extract_tb(current.__traceback__))
        current = current.__cause__ or current.__context__
    return out
