"""``jax-shard-lint suggest`` (``command.py``) and its parts: the problem of a target (``target.py``), the
arguments kept fixed (``fixed.py``), the versions compiled to compare (``versions.py``), the single moves of a
mesh axis (``moves.py``), the verdict (``verdict.py``), the in_shardings text (``in_shardings.py``) and the
logical-axis rules advice (``logical.py``)."""

from .command import suggest
from .target import SuggestRequest

__all__ = ["SuggestRequest", "suggest"]
