"""suggest's ILP: the sharding problem, its solve (HiGHS or local search) and the propagation check."""
