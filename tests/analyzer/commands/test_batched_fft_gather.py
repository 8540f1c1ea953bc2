"""A batch of independent simulations sharded on the batch (spectral_batch_on_grid_axis's on_sims, the layout
an expert writes for jax-cfd's pseudospectral solver): where XLA still gathers every FFT's operand whole (jax
0.10.2's partitioner computes an FFT replicated unless it is sharded along what it transforms), SL101 says so
and gives the fix that works, the FFTs under shard_map, instead of "shard a dimension this op does not read
along", which the layout already does (issue 46). The oracle is XLA: the compiled text's all-gathers and the
FFTs they feed, and the shard_map version compiled here, with no collective and a lower peak."""

import json
import os
import re

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module

SCRIPT = os.path.join("fixtures", "scripts", "spectral_batch_on_grid_axis.py")


def _peak(compiled) -> int:
    m = compiled.memory_analysis()
    return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes


def _batch_gathers(text: str) -> list[str]:
    """The all-gathers whose result an FFT transforms along its last two dimensions only, gathered on dim 0."""
    gathers = dict(re.findall(r"%(all-gather[.\d]*) = \S+ all-gather\(.*?dimensions=\{(\d+)\}", text))
    ffts = re.findall(r"= \S+ fft\(%(all-gather[.\d]*)\), fft_type=\w+, fft_length=\{(\d+),(\d+)\}", text)
    return sorted(name for name, *_ in ffts if gathers.get(name) == "0")


def test_a_batch_sharded_fft_xla_gathers_gets_shard_map_not_another_sharding(cli, monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)
    module = script_module(SCRIPT)
    lowered = module.shard_lint_targets()["on_sims"]
    compiled = lowered.compile()
    text = compiled.as_text()
    gathered = _batch_gathers(text)

    result = cli("lint", SCRIPT, "--target", "on_sims", "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    findings = [f for f in json.loads(result.out)["targets"][0]["findings"] if f["rule"] == "SL101"]
    if not gathered:  # this XLA keeps a batched FFT local: nothing is gathered, nothing to report
        assert " all-gather(" not in text
        assert findings == []
        return
    # jax 0.10.2: the four irfftn operands c64[8,256,129] and the rfftn's gathered on the batch dim: one cause,
    # one finding, naming the argument sharded on sims.
    assert [f["source"]["line"] for f in findings] == [28]
    [f] = findings
    assert any("this XLA partitions an FFT only along what it transforms" in why for why in f["provenance"])
    assert set(gathered) <= set(f["ops"]) == set(re.findall(r"%(all-gather[.\d]*) = ", text)), (f["ops"], gathered)
    assert f["parameter"] == "vorticity_hat", f
    # Its fix, the FFTs under shard_map on the batch, compiled by lint: measured better, with no collective left.
    check = f["fix_check"]
    assert check["change"] == "the FFTs under jax.shard_map over sims on their batch", check
    assert check["verdict"] == "better" and check["traffic_bytes_after"] == 0, check
    assert check["peak_bytes_before"] == _peak(compiled) > check["peak_bytes_after"], check
    assert f["fix"].startswith("run the FFTs under jax.shard_map over sims"), f["fix"]

    # The fix, compiled: the same rollout under shard_map on the batch has no collective and a lower peak.
    mesh = jax.make_mesh((8,), ("sims",), axis_types=(AxisType.Auto,))
    spec = P("sims", None, None)
    local = jax.jit(jax.shard_map(lambda w: module.rollout(w, 256, 2), mesh=mesh, in_specs=spec, out_specs=spec))
    fixed = local.lower(jax.ShapeDtypeStruct((8, 256, 129), jnp.complex64,
                                             sharding=NamedSharding(mesh, spec))).compile()
    fixed_text = fixed.as_text()
    assert not re.search(r" (all-gather|all-reduce|all-to-all|collective-permute)(-start)?\(", fixed_text)
    assert _peak(fixed) < _peak(compiled)
