"""A fusion XLA rooted at an op it made itself has no metadata, so no line; its fused ops carry the user's
(newbie19 F10: haliax LM's largest buffer at the peak, f32[8,512,50304] broadcast_select_fusion.1, 17% of it,
had source '-' though its one-hot, subtract and unembedding dot were at lm_step.py:48 and :43).

The oracle is the compiled program's text: the fusion line without metadata, and the lines XLA's stack-frame
tables give the ops fused into it."""

import re
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
    """The lines (innermost frame) XLA's tables give each op with a stack frame fused into ``fusion``."""
    table = dict(re.findall(r"^(\d+) \{file_name_id=\d+ function_name_id=\d+ line=(\d+)", text, re.M))
    frames = dict(re.findall(r"^(\d+) \{file_location_id=(\d+) parent", text, re.M))
    [called] = re.findall(rf"%{re.escape(fusion)} = [^\n]* calls=%([\w.\-]+)", text)
    body = re.search(rf"^%{re.escape(called)} \(.*?^\}}", text, re.M | re.S).group(0)
    return Counter(int(table[frames[f]]) for f in re.findall(r"stack_frame_id=(\d+)", body))


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
