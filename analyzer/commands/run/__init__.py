"""``jax-shard-lint run`` (``command.py``: the unmodified script in a child process, its XLA dump read back) and
its parts: ``run --processes N`` (``processes.py``) and the process counts it runs at (``process_counts.py``).
Nothing is imported here: the supervising parent reads ``process_counts`` without importing JAX."""
