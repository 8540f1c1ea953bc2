"""suggest.logical: the logical axis rules that give a suggestion, resolved by Flax itself."""

from ci_deps import require

from jax_shard_lint.analyzer.commands.suggest.logical import rule_advice
from jax_shard_lint.passes.models.suggest import ChosenSharding


def _arg(path, shape, suggested, per_device):
    return ChosenSharding(index=0, path=path, shape=list(shape), dtype="f32", current=None, suggested=suggested,
                          current_per_device_bytes=per_device, suggested_per_device_bytes=per_device)


def test_a_name_wanted_two_ways_takes_the_heavier_and_lists_the_other():
    require("flax", "flax is not installed (the [test] extra)")
    rules = [("embed", "tp"), ("mlp", "fsdp")]
    names = {"params['big']": ("embed", "mlp"), "params['small']": ("mlp", "embed")}
    args = [_arg("params['big']", (512, 2048), [[], ["fsdp"]], 2 << 20),
            _arg("params['small']", (64, 512), [["tp"], ["fsdp"]], 4 << 10)]
    advice = rule_advice(args, rules, names)
    assert advice.rules_text == "rules = (('embed', None), ('mlp', 'fsdp'))"
    assert [(c.logical, c.written, c.suggested, c.dimensions) for c in advice.changes] == [("embed", ["tp"], [], 2)]
    assert (advice.reached, advice.covered) == (1, 2)
    assert advice.exceptions == ["params['small']: the rules give P('fsdp'), the suggestion is P('tp', 'fsdp')"]


def test_arguments_without_names_give_no_advice():
    assert rule_advice([_arg("x", (8,), [[]], 32)], [("batch", "data")], {"y": ("batch",)}) is None
