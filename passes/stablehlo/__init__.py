"""Facts of the lowered program: the StableHLO module, its entry signature, state and loops."""
