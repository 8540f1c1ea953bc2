"""A fusion XLA rooted at an op it made itself has no metadata, so no line; its fused ops carry the user's
(newbie19 F10: haliax LM's largest buffer at the peak, f32[8,512,50304] broadcast_select_fusion.1, 17% of it,
had source '-' though its one-hot, subtract and unembedding dot were at lm_step.py:48 and :43).

The oracle is the compiled program's text: the fusion line without metadata, and the lines XLA's stack-frame
tables give the ops fused into it."""

import os
import re
import sys
from collections import Counter

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_shard_lint.analyzer.testing import analyze

VOCAB = 8192


def _step(w, x, targets):
    def loss_fn(w):
        logits = jnp.einsum("bsd,vd->bsv", x, w)
        return jnp.mean(jnp.einsum("bsv,bsv->bs", jax.nn.one_hot(targets, VOCAB), jax.nn.logsumexp(logits, axis=-1, keepdims=True) - logits))  # noqa: E501
    loss, g = jax.value_and_grad(loss_fn)(w)
    return w - 1e-3 * g, loss


def _fused_op_lines(text: str, fusion: str) -> Counter:
    """The lines (innermost frame) XLA's tables give each op with a stack frame fused into ``fusion`` (but a
    constant: XLA shares one among unrelated ops)."""
    table = dict(re.findall(r"^(\d+) \{file_name_id=\d+ function_name_id=\d+ line=(\d+)", text, re.M))
    frames = dict(re.findall(r"^(\d+) \{file_location_id=(\d+) parent", text, re.M))
    [called] = re.findall(rf"%{re.escape(fusion)} = [^\n]* calls=%([\w.\-]+)", text)
    body = re.search(rf"^%{re.escape(called)} \(.*?^\}}", text, re.M | re.S).group(0)
    return Counter(int(table[frames[f]]) for op in body.splitlines() if " constant(" not in op
                   for f in re.findall(r"stack_frame_id=(\d+)", op))


def test_a_fusion_without_metadata_is_at_its_fused_ops_line():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:8])
    w = jax.ShapeDtypeStruct((VOCAB, 256), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((16, 64, 256), jnp.float32, sharding=NamedSharding(mesh, P("data")))
    targets = jax.ShapeDtypeStruct((16, 64), jnp.int32, sharding=NamedSharding(mesh, P("data")))
    lowered = jax.jit(_step).lower(w, x, targets)
    text = lowered.compile().as_text()
    # XLA's word: the per-device loss gradient f32[2,64,8192] is a fusion with no metadata of its own, rooted
    # at the select the simplifier made of the one-hot product; the ops fused into it are at the loss line.
    [fusion] = [name for name, rest in re.findall(r"^  %(\S+) = f32\[2,64,8192\]\{2,1,0\} fusion\(([^\n]*)$", text,
                                                  re.M) if "metadata=" not in rest]
    lines = _fused_op_lines(text, fusion)
    [(loss_line, _)] = lines.most_common(1)
    assert lines[loss_line] >= 3, lines

    report = analyze(lowered, "lm")
    [live] = [b for b in report.memory.live_at_peak if b.name == fusion]
    assert (live.shape, live.op_name) == ([2, 64, 8192], None)
    assert live.source is not None and (live.source.file, live.source.line) == (__file__, loss_line)
    assert live.via is None


def test_a_fusion_without_metadata_is_at_the_line_most_of_its_ops_are():
    # examples/value_function_step.py: jnp.interp's searchsorted index s32[16,16384], rooted at a select XLA
    # made (a float compare as integers), fuses the cash grid's add (line 31), the savings' multiply (32) and
    # the search's compares and selects (34, the interp line): most of its ops are at the interp.
    from conftest import EXAMPLES
    sys.path.insert(0, EXAMPLES)
    try:
        import value_function_step
    finally:
        sys.path.remove(EXAMPLES)
    lowered = value_function_step.shard_lint_targets(states=128, grid_points=1024, n_choices=16,
                                                     mesh_devices=jax.devices()[:8])["sharded_on_states"]
    text = lowered.compile().as_text()
    [fusion] = [name for name, rest in re.findall(r"^  %(\S+) = s32\[16,16384\]\{1,0\} fusion\(([^\n]*)$", text,
                                                  re.M) if "metadata=" not in rest]
    lines = _fused_op_lines(text, fusion)
    [(most, n), (second, m)] = lines.most_common(2)
    assert n > m and len(lines) >= 3, lines  # several lines, one the most

    report = analyze(lowered, "sharded_on_states")
    [live] = [b for b in report.memory.live_at_peak if b.name == fusion]
    assert live.source is not None and (os.path.basename(live.source.file), live.source.line) == (
        "value_function_step.py", most)
