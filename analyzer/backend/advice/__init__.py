"""suggest's advice, shared by ``suggest`` and by lint's and check's fix checks: a target's sharding
problem and its solve-and-refine loop (problem.py), the single moves of a mesh axis (moves.py), a compiled
version's figures, the rule that ranks versions and suggest's verdict line (verdict.py), and suggest's
layout for the arguments of a finding whose own fix failed (solver_fixes.py)."""
