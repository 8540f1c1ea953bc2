"""What the analyzer reads of the StableHLO it edits and compiles itself (rewrite's pins, the fix checks'
candidates, suggest's versions, checked-in modules), beside the pipelines that analyse it: a module's
entry function and functions (XLA's import wants ``@main``), why a checked-in module has no entry, the
state round trips (an output returning an input's state: the fix checks' candidates, the out_shardings
text), the stated sharding constraints and the even alternatives to an uneven one (SL204's fix), and a
clone of a module to edit."""

from __future__ import annotations

from ..propagation.shardy_reference import clone, walk_ops
from ..stablehlo.module import entry_function, functions, missing_entry
from ..stablehlo.sharding_constraints import axes_off, constraint_ops, even_alternatives, read_constraints
from ..stablehlo.state_roundtrip import RoundTrip, correspond, mismatched

__all__ = ["RoundTrip", "axes_off", "clone", "constraint_ops", "correspond", "entry_function", "even_alternatives",
           "functions", "mismatched", "missing_entry", "read_constraints", "walk_ops"]
