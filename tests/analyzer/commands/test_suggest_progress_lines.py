"""suggest's progress lines: the versions it compiles are told apart (the single moves by what they move, the
solver's plans by number), and a solve that runs long says so while it runs (HiGHS reports nothing until it
returns). No compile here: the lines are made from the versions' names and descriptions."""

from __future__ import annotations

import threading
import time

from jax_shard_lint.analyzer.backend.advice.verdict import VersionText
from jax_shard_lint.analyzer.backend.side_by_side import announced, shortened
from jax_shard_lint.analyzer.commands.suggest.versions import SolveHeartbeat, version_labels


def test_versions_that_share_a_name_are_told_apart():
    long_move = "params['embed']: P() -> P('fsdp'), 'fsdp' off " + ", ".join(f"params['w{k}']" for k in range(10))
    versions = [VersionText("written", "the shardings the program states", "a"),
                VersionText("single move", "x: P() -> P('data')", "b"),
                VersionText("single move", long_move, "c"),
                VersionText("solver", "the solver's choice", "d"),
                VersionText("solver", "the solver's choice", "e")]
    labels = version_labels(versions)
    assert labels[:2] == ["the written version", "the single move version (x: P() -> P('data'))"]
    assert labels[2].startswith("the single move version (params['embed']: P() -> P('fsdp'), 'fsdp' off")
    assert labels[2].endswith("…)") and len(labels[2]) < 100
    assert labels[3:] == ["the solver version (1 of 2)", "the solver version (2 of 2)"]
    assert len(set(labels)) == len(labels)


class _Compiles:
    def finished(self):
        return 3, 12


def test_a_long_solve_says_it_is_still_solving_with_the_compiles_beside_it():
    lines: list[str] = []
    lock = threading.Lock()

    def say(msg):
        with lock:
            lines.append(msg)

    with SolveHeartbeat(say, "train_step", _Compiles(), every=0.01):
        deadline = time.monotonic() + 10
        while not lines and time.monotonic() < deadline:
            time.sleep(0.01)
    seen = len(lines)
    time.sleep(0.05)
    assert seen >= 1 and len(lines) == seen  # nothing after the solve returned
    assert lines[0].startswith("train_step: still solving (") and lines[0].endswith("; 3/12 compiles beside it done")


def test_no_heartbeat_without_progress_output():
    with SolveHeartbeat(None, "train_step", None, every=0.01) as beat:
        time.sleep(0.03)
    assert beat.thread is None


def test_a_long_announce_line_counts_the_versions_that_share_a_name():
    """The announce line of 12 compiles named every single move in full (about 1,000 characters, 10 lines
    at 100 columns); each is named again on its own line when done, so the announce counts them."""
    moves = [f"the single move version (params['embed']: P() -> P('tp{k}'), 'tp{k}' off params['layers'])"
             for k in range(8)]
    labels = ["the written version", "the replicated version", "the data-parallel version", "the fsdp version"]
    assert announced(labels + moves) == ("the written version; the replicated version; the data-parallel "
                                         "version; the fsdp version; 8 single move versions")
    assert announced([f"the solver version ({k} of 6)" for k in range(1, 7)]) == "6 solver versions"
    short = ["params['w'] -> P(None, 'tp')", "pin out_shardings"]
    assert announced(short) == "; ".join(short)


def test_a_move_of_many_paths_is_shortened_to_its_head_and_its_layout():
    """A Llama's attention kernels with their optimizer state: the label named every path (thousands of
    characters on one progress line); shortened, it keeps what moves and the layout it moves to."""
    paths = ", ".join(f"opt_state[0].mu['model']['layers']['{k}']['self_attn']['o_proj']['kernel']" for k in range(4))
    label = f"params['model']['layers'][*]['self_attn']['o_proj']['kernel'] with {paths} -> P(None, ('data', 'model'))"
    short = shortened(label)
    # The path is never cut inside a key: its middle keys left out, its last ones (the weight) kept (issue 46).
    assert short == "params…[*]['self_attn']['o_proj']['kernel'] and 4 more -> P(None, ('data', 'model'))"
    move = ("params['embed'], opt_state['mu']['embed'], opt_state['nu']['embed'] -> P('fsdp') (returned in that "
            "layout) (move 0)")
    # Whole paths as fit, then how many more; the layout and what the candidate is kept whole.
    assert shortened(move) == "params['embed'] and 2 more -> P('fsdp') (returned in that layout) (move 0)"
    three = [short, short.replace("'model'))", "'data'))"), short.replace("('data', 'model')", "'data'")]
    assert announced(three) == "each named below when it is compiled"
    assert shortened("x -> P('tp')") == "x -> P('tp')"
