"""A pytest plugin (registered through the ``pytest11`` entry point): the
``shard_lint`` fixture gives tests the assertions of
:mod:`jax_shard_lint.analyzer.testing`."""

from __future__ import annotations

import types

import pytest


@pytest.fixture
def shard_lint():
    from . import testing

    return types.SimpleNamespace(
        analyze=testing.analyze,
        assert_no_collectives=testing.assert_no_collectives,
        assert_peak_below=testing.assert_peak_below,
    )
