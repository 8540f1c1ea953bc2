"""Colour refinement (``passes/solver/symmetry.py``) on sharding problems written by hand, no compile: what it
ties is checked against a brute-force oracle (every assignment of every group's candidates, each op at its
cheapest strategy, the ties and nothing else obeyed), never against the classes the pass found.

- Repeated layers (one input read by identical layers, the first layer's weight costed apart): the later
  layers share one class, the first stays apart, and the tied solve's objective is the untied optimum.
- Ties (state in, state out) are part of what makes two groups alike: a group tied to another is not the
  same as its twin left free, and tying the two would cost the optimum (2 s against 1 s).
- A problem with nothing alike is not tied; one whose groups all differ but whose ops are alike ties the ops.
- Two identical chains are told apart end to end one op per round: ``MAX_ROUNDS`` (100) rounds tie two chains
  of 99 ops pairwise, and leave two of 100 untied (an unstable partition is not used).
"""

import itertools

import pytest

from jax_shard_lint.passes.solver.sharding_problem import (
    Assignment,
    OpChoice,
    ShardingProblem,
    Use,
    ValueGroup,
    evaluate,
)
from jax_shard_lint.passes.solver.solve import solve
from jax_shard_lint.passes.solver.symmetry import symmetric_classes, tie_symmetric

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

CANDIDATES = (((),), (("d",),))  # replicated, split over d
RESHARD = ((0.0, 1.0), (1.0, 0.0))  # [wanted][candidate]: 1 s to move a value off the candidate its op wants
TOL = 1e-9


def _group(g, unary, shape=(4,)):
    return ValueGroup(g, (g,), shape, "f32", CANDIDATES, unary)


def _problem(groups, ops=(), ties=(), arguments=(0,), results=()):
    return ShardingProblem({"d": 2}, ("d",), tuple(groups), tuple(ops), (), None, tuple(ties), arguments, results)


def brute_force(problem: ShardingProblem) -> float:
    """The least cost over every candidate of every group, the ties obeyed; each op takes its cheapest strategy
    given its groups (exact: an op's cost depends on its own strategy and its groups only)."""
    best = float("inf")
    for groups in itertools.product(*(range(len(g.candidates)) for g in problem.groups)):
        if any(groups[a] != groups[b] for a, b in problem.ties):
            continue
        ops = tuple(min(range(len(op.strategies)), key=lambda s, op=op: op.seconds[s] + sum(
            u.seconds[u.wanted[s]][groups[u.group]] for u in op.uses)) for op in problem.ops)
        best = min(best, evaluate(problem, Assignment(groups, ops))[0])
    return best


def _layers(n: int, first_weight=(0.2, 0.0)):
    """x (group 0) read by n identical layers: layer i's weight is group 2i+1, its output 2i+2. Strategy 0 keeps x
    whole and splits the weight and the output; strategy 1 the other way round (1.5 s against 1 s of compute)."""
    groups = [_group(0, (0.0, 0.5), shape=(8,))]
    ops = []
    for i in range(n):
        w, h = 2 * i + 1, 2 * i + 2
        groups += [_group(w, first_weight if i == 0 else (0.2, 0.0)), _group(h, (0.0, 0.3))]
        ops.append(OpChoice(i, "dot_general", ((), ()), (1.0, 1.5), (0.0, 0.0),
                            (Use(0, False, (0, 1), CANDIDATES, RESHARD), Use(w, False, (1, 0), CANDIDATES, RESHARD),
                             Use(h, True, (1, 0), CANDIDATES, RESHARD)), 1))
    return _problem(groups, ops, arguments=tuple(range(0, 2 * n, 2)), results=tuple(range(2, 2 * n + 1, 2)))


def test_repeated_layers_after_the_first_share_one_class_and_the_tied_solve_is_the_untied_optimum():
    problem = _layers(3, first_weight=(0.0, 0.4))
    shared = tie_symmetric(problem)
    assert shared is not None
    weights, outputs = [shared.group_class[g] for g in (1, 3, 5)], [shared.group_class[g] for g in (2, 4, 6)]
    # The first layer's weight costs apart, and what it touches (its op, its output) is told apart with it.
    assert weights[1] == weights[2] != weights[0] and outputs[1] == outputs[2] != outputs[0]
    assert shared.op_class[1] == shared.op_class[2] != shared.op_class[0]
    assert len(set(shared.group_class)) == 5 and len(set(shared.op_class)) == 2
    optimum = brute_force(problem)
    plan = solve(problem, "ilp", tie=True)
    assert plan.tied_by == ("symmetry",) and plan.variables < solve(problem, "ilp", tie=False).variables
    assert plan.seconds == pytest.approx(optimum, rel=TOL)
    assert evaluate(problem, plan.assignment)[0] == pytest.approx(optimum, rel=TOL)


def test_identical_layers_are_one_class_from_the_first_round():
    """Every layer alike (the first too): the starting colours are already stable, so the first round splits
    nothing and the partition is the answer."""
    problem = _layers(4)
    group_colour, op_colour = symmetric_classes(problem)
    assert len(set(op_colour)) == 1
    assert len({group_colour[g] for g in (1, 3, 5, 7)}) == 1 and len({group_colour[g] for g in (2, 4, 6, 8)}) == 1
    assert len(set(group_colour)) == 3
    assert solve(problem, "ilp", tie=True).seconds == pytest.approx(brute_force(problem), rel=TOL)


def _tied_state():
    """Six groups and no op. 0 and 1 alike (each wants to stay whole, 1 s split), 2 and 3 alike (each wants to be
    split, 10 s whole), 4 and 5 alike; 0 is tied to 2 (a state in and its state out), 1 is free. The optimum: 0 and
    2 split (1 s), 1 whole, 3 split."""
    return _problem([_group(0, (0.0, 1.0)), _group(1, (0.0, 1.0)), _group(2, (10.0, 0.0)), _group(3, (10.0, 0.0)),
                     _group(4, (0.0, 2.0)), _group(5, (0.0, 2.0))], ties=[(0, 2)])


def test_a_tie_tells_a_group_from_its_free_twin():
    problem = _tied_state()
    shared = tie_symmetric(problem)
    assert shared is not None
    # Only 4 and 5 are alike: 0 and 1 differ by the tie, and so do 2 and 3.
    assert len(set(shared.group_class)) == 5 and shared.group_class[4] == shared.group_class[5]
    assert shared.problem.ties == ((shared.group_class[0], shared.group_class[2]),)
    optimum = brute_force(problem)
    assert optimum == pytest.approx(1.0)
    plan = solve(problem, "ilp", tie=True)
    assert plan.tied_by == ("symmetry",)
    assert plan.seconds == pytest.approx(optimum, rel=TOL)
    # Tying 0 with 1 (and so 2 with 3) would force all four to one candidate: 2 s.
    assert brute_force(_problem(problem.groups, ties=[(0, 2), (0, 1), (2, 3)])) == pytest.approx(2.0)


def test_a_problem_with_nothing_alike_is_not_tied():
    uses = (Use(0, False, (0, 1), CANDIDATES, RESHARD), Use(1, False, (0, 1), CANDIDATES, RESHARD),
            Use(2, True, (0, 1), CANDIDATES, RESHARD))
    problem = _problem([_group(0, (0.0, 1.0)), _group(1, (0.0, 2.0)), _group(2, (0.0, 3.0))],
                       [OpChoice(0, "add", ((), ()), (1.0, 2.0), (0.0, 0.0), uses, 1)])
    group_colour, op_colour = symmetric_classes(problem)
    assert len(set(group_colour)) == 3 and len(set(op_colour)) == 1
    assert tie_symmetric(problem) is None


def test_ops_alike_on_groups_that_all_differ_are_tied():
    """Two identical ops reading the one group the same way: the groups all differ (there are two, unalike), the
    ops are one class."""
    reads = [OpChoice(i, "tanh", ((), ()), (1.0, 0.5), (0.0, 0.0),
                      (Use(0, False, (0, 1), CANDIDATES, RESHARD),), 1) for i in range(2)]
    problem = _problem([_group(0, (0.0, 0.0)), _group(1, (0.0, 1.0))], reads)
    shared = tie_symmetric(problem)
    assert shared is not None
    assert shared.op_class == (0, 0) and shared.group_class == (0, 1)
    assert solve(problem, "ilp", tie=True).seconds == pytest.approx(brute_force(problem), rel=TOL)


def _chains(n: int, copies: int = 2):
    """``copies`` identical chains of n elementwise ops (group k reads group k-1). Refinement tells a chain's
    groups apart from its ends inwards, one op a round: it is stable on round n + 1."""
    groups, ops = [], []
    for c in range(copies):
        first = c * (n + 1)
        groups += [_group(first + k, (0.0, 0.0)) for k in range(n + 1)]
        ops += [OpChoice(len(ops), "tanh", ((), ()), (0.0, 0.0), (0.0, 0.0),
                         (Use(first + k, False, (0, 1), CANDIDATES, RESHARD),
                          Use(first + k + 1, True, (0, 1), CANDIDATES, RESHARD)), 1) for k in range(n)]
    return _problem(groups, ops)


def test_two_chains_are_tied_pairwise_when_refinement_settles_within_its_hundred_rounds():
    n = 99  # stable on round 100
    shared = tie_symmetric(_chains(n))
    assert shared is not None
    assert shared.group_class[: n + 1] == shared.group_class[n + 1:] == tuple(range(n + 1))
    assert shared.op_class[:n] == shared.op_class[n:] == tuple(range(n))


def test_two_chains_refinement_cannot_settle_in_a_hundred_rounds_are_left_untied():
    assert symmetric_classes(_chains(100)) is None  # stable on round 101
    assert tie_symmetric(_chains(100)) is None
