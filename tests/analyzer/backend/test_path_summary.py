"""A fix text's long list of state paths, summarized by key path with layers as [*] (newcomer13's BERT: SL201's
small outputs, 66 paths, were listed one by one over ~70 lines). The paths are the user's pytree's, as
FlaxBertForMaskedLM + optax AdamW name them (lint100_pane_raw.txt): 2 layers, each key path once under params
and once under each Adam moment."""

from jax_shard_lint.analyzer.backend.path_summary import summarized_paths

_KEYS = [f"['bert']['encoder']['layer']['{i}']['attention']['output']['LayerNorm']['{leaf}']"
         for i in ("0", "1") for leaf in ("bias", "scale")] + ["['bert']['embeddings']['LayerNorm']['bias']"]
_PATHS = [root + key for key in _KEYS for root in ("params", "opt_state[0].mu", "opt_state[0].nu")]


def test_a_long_list_is_counted_and_collapsed_by_layer():
    text = summarized_paths(_PATHS)
    assert text.startswith("the 15 state inputs under params, opt_state[0].mu and opt_state[0].nu (3 key paths, ")
    # Each LayerNorm leaf: 2 layers x (params, mu, nu) = 6 paths, one pattern.
    assert "['bert']['encoder']['layer'][*]['attention']['output']['LayerNorm']['bias'] (x6)" in text
    assert "['bert']['embeddings']['LayerNorm']['bias'] (x3)" in text
    assert "['0']" not in text and text.count("opt_state") == 2


def test_a_short_list_is_named_whole():
    assert summarized_paths(_PATHS[:2]) == f"{_PATHS[0]} and {_PATHS[1]}"


# An equinox MLP under optax Adam names its state by attribute (a newcomer's diffrax neural ODE, newbie16 F7):
# no string key ends the argument, and the summary read "(1 key path, layers as [*]:  (x6))".
_EQX_KEYS = [f".mlp.layers[{i}].{leaf}" for i in (0, 1, 2) for leaf in ("weight", "bias")]
_EQX_PATHS = [root + key for key in _EQX_KEYS for root in ("params", "opt_state[0].mu", "opt_state[0].nu")]


def test_attribute_paths_are_summarized_by_the_key_path_they_share():
    text = summarized_paths(_EQX_PATHS)
    assert text == ("the 18 state inputs under params, opt_state[0].mu and opt_state[0].nu (2 key paths, layers "
                    "as [*]: .mlp.layers[*].bias (x9) and .mlp.layers[*].weight (x9))")
    # A parameter alone (no optimizer state beside it) is its own argument's name.
    assert summarized_paths([f"params{k}" for k in _EQX_KEYS]).startswith("the 6 state inputs under params (2 key")
