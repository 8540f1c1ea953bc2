"""fit's search on peak curves a step gives: flat where fixed costs dominate, then linear. The oracle is brute
force over the same curve; what is checked is that the search finds its answer and how far past it it probes.

A ViT's batch 4 and 8 both measured 32.0 MiB (a few KiB apart): the secant through them jumped to batch 19,116
(27.5 GiB) and halved six times, 13 probes and 192 s (newcomer12)."""

import pytest

from jax_shard_lint.analyzer.commands.fit import search

MiB = 1 << 20


def _curve(flat, intercept, slope):
    """A peak nearly ``flat`` (12 KB more a value: the ViT's probes 4 and 8 were that close) until the
    linear part passes it (bytes per value)."""
    return lambda v: max(flat + 12_000 * v, int(intercept + slope * v))


@pytest.mark.parametrize("flat, intercept, slope, budget", [
    (32 * MiB, 19.3 * MiB, 1.5 * MiB, 256 * MiB),  # the ViT: answer 176 (multiples of 4)
    (32 * MiB, 0, 0.25 * MiB, 256 * MiB),
    (900 * MiB, 100 * MiB, 3 * MiB, 2048 * MiB),
])
def test_a_flat_start_does_not_send_the_search_far_past_its_answer(flat, intercept, slope, budget):
    peak = _curve(flat, intercept, slope)
    probed = []

    def probe(v):
        probed.append(v)
        return peak(v)

    answer, _ = search(probe, budget, 1, 65536, 4)
    brute = max(v for v in range(4, 65537, 4) if peak(v) <= budget)
    assert answer == brute
    assert max(probed) <= 8 * brute, probed  # never more than the growth bound past a fitting probe
    assert len(set(probed)) <= 10, probed


def _bent_then_affine(v):
    """newbie16's diffrax ensemble step (batch a multiple of 8, 2 GiB): 6.2 MiB at batch 8, then affine, 3.0 MiB
    + 0.36 MiB a member from batch 16 (its probes 16, 128, 1088 and 5760 lie on that line)."""
    return int(6.2 * MiB) if v <= 8 else int(2.744 * MiB + 0.35985 * MiB * v)


def test_an_affine_peak_is_predicted_once_its_line_holds_and_only_the_answer_has_its_neighbour_probed():
    # It probed 8, 16, 128, 136, 1088, 1096, 5784, 5760, 5768: each value the growth bound chose had its neighbour
    # compiled too, as if the line had put the answer there. Once a third probe lies on the line, the line's
    # answer is compiled, and its neighbour.
    probed = []

    def probe(v):
        probed.append(v)
        return _bent_then_affine(v)

    budget = 2048 * MiB
    answer, _ = search(probe, budget, 1, 65536, 8)
    brute = max(v for v in range(8, 65537, 8) if _bent_then_affine(v) <= budget)
    assert answer == brute
    values = list(dict.fromkeys(probed))
    assert values == [8, 16, 128, 1024, brute, brute + 8], values
