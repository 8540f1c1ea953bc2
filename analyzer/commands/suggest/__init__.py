"""``jax-shard-lint suggest`` (``command.py``) and its parts: the problem of a target (``target.py``), the
arguments kept fixed (``fixed.py``), the versions compiled to compare (``versions.py``), the single moves of a
mesh axis (``moves.py``), the verdict (``verdict.py``), the in_shardings text (``in_shardings.py``), the
logical-axis rules advice (``logical.py``), and suggest's layout for the arguments of a finding whose own fix
failed, which lint and check print (``solver_fixes.py``)."""

from .command import suggest
from .target import SuggestRequest

__all__ = ["SuggestRequest", "suggest"]
