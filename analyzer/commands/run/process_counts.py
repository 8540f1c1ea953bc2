"""The process counts ``run --processes N`` runs the script at (no JAX: the supervising parent reads it
to size its time limit)."""


def process_counts(largest: int) -> list[int]:
    """1, 2, 4, ... up to ``largest``, and ``largest`` itself."""
    counts, n = [], 1
    while n < largest:
        counts.append(n)
        n *= 2
    return counts + [largest]
