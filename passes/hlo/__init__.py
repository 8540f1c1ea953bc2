"""Facts of the compiled program: XLA's HLO text parsed, its collectives, memory, cost and step time."""
