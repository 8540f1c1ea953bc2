"""``jax-shard-lint rewrite`` (``command.py``: the edit of the entry's shardings and the two compiles) and its
part: the rewritten program run against the original (``validate.py``, ``--validate``)."""
