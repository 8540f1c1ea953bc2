"""``jax-shard-lint suggest`` (``command.py``) and its parts: the request and the problem of a target read
from it (``target.py``), the arguments kept fixed (``fixed.py``), the versions compiled to compare
(``versions.py``), the in_shardings text (``in_shardings.py``), the logical-axis rules advice
(``logical.py``). What lint's and check's fix checks share with it (a target's sharding problem, the single
moves of a mesh axis, the versions' ranking and the verdict, suggest's layout for the arguments of a finding
whose own fix failed) is ``backend/advice/``'s."""
