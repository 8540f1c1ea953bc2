"""Progress lines tell their compiles apart and count against a total that never changes (issue 46, newbie15's
F9, a jraph GNN's lint and suggest): a move's label was cut inside a path ("params['params']['M… and 2 more"),
lint's counter went [2/3] -> [2/4] when the solver's plan was announced after the moves, and suggest printed
"compiled the single move version (params['params']['MLP_0']['Dense_0']['kernel']: P('model')…)" for five
different moves of one weight. No compile here: the labels and the counter are what is tested."""

import re

from jax_shard_lint.analyzer.backend.advice.verdict import VersionText
from jax_shard_lint.analyzer.backend.side_by_side import CompileCounter, distinct_labels
from jax_shard_lint.analyzer.commands.suggest.versions import version_labels

KERNEL = "['params']['{}']['Dense_0']['kernel']"


def _move(layer: str, spec: str, k: int) -> str:
    """A lint move's label as solver_fixes writes it: the kernel, its Adam moments, the layout, the move."""
    path = KERNEL.format(layer)
    return (f"params{path}, opt_state[0].mu{path}, opt_state[0].nu{path} -> {spec} (returned in that layout) "
            f"(move {k})")


def test_labels_of_different_moves_read_apart_within_the_width_and_keep_whole_keys():
    labels = [_move("MLP_0", "P()", 2), _move("MLP_0", "P(('data', 'model'))", 0), _move("MLP_3", "P()", 2)]
    shown = distinct_labels(labels)
    assert len(set(shown)) == 3
    for s in shown:
        # No key is cut: every bracket the line opens closes, and a left-out middle is marked.
        assert not re.search(r"\['[^\]]*…", s), s
    assert shown[1] == "params…['kernel'] and 2 more -> P(('data', 'model')) (returned in that layout) (move 0)"
    assert all(len(s) <= 90 for s in shown[:2])  # within the width where the short form tells them apart
    assert "MLP_3" in shown[2] and "MLP_0" in shown[0]  # made wider where it would not


def test_suggests_single_moves_of_one_weight_are_named_by_the_layout_they_move_to():
    kernel = "params" + KERNEL.format("MLP_0")
    specs = ["P()", "P(('data', 'model'))", "P('model', 'data')", "P(None, 'model')", "P('data')"]
    versions = [VersionText("single move", f"{kernel}: P('model') -> {s}", str(k)) for k, s in enumerate(specs)]
    labels = version_labels(versions)
    assert len(set(labels)) == len(labels)
    assert [label.rsplit(" -> ", 1)[1] for label in labels] == [s + ")" for s in specs]


def test_each_announced_batch_counts_against_its_own_fixed_total():
    lines: list[str] = []
    counter = CompileCounter(lines.append, "tp_mistake")
    moves = counter.announce(["x -> P('a') (move 0)", "x -> P('b') (move 1)", "x -> P() (move 2)"], "to check moves")
    moves[0]()
    moves[1]()
    plans = counter.announce(["y -> P('a') (solver)"], "to check layouts")
    moves[2]()
    plans[0]()
    counts = [re.match(r"\[(\d+)/(\d+)\]", line).groups() for line in lines if line.startswith("[")]
    assert counts == [("0", "3"), ("1", "3"), ("2", "3"), ("0", "1"), ("3", "3"), ("1", "1")], lines
