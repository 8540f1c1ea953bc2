"""A buffer XLA fills from constants (a ``wrapped_broadcast`` fusion of a constant, with no op_name or line of
its own: ott's Sinkhorn gradient has a 512 MiB one at its peak) is at its consumer's line. The compiled HLO is
XLA's (a gradient through a loop, compiled here); which fusion has no metadata and which instruction reads it are
read from XLA's text, not from the pass."""

import re

import jax
import jax.numpy as jnp

from jax_shard_lint.passes.hlo.constant_fills import fill_consumer, is_constant_fill
from jax_shard_lint.passes.hlo.parser import parse_hlo_module


def _loss(x, y):
    def body(i, f):
        c = jnp.sum((x[:, None, :] - y[None, :, :]) ** 2, -1)
        return jax.nn.logsumexp(-(c - f[:, None]) / 0.05, axis=1)
    return jnp.sum(jax.lax.fori_loop(0, 3, body, jnp.zeros(x.shape[0])))


def _readers(text, name):
    return [m.group(1) for m in re.finditer(rf"^\s*%([\w.\-]+) = .*\(.*%{re.escape(name)}[,)]", text, re.M)]


def test_a_constant_fill_without_a_line_is_at_its_consumers():
    text = jax.jit(jax.grad(_loss)).lower(jax.ShapeDtypeStruct((512, 16), jnp.float32),
                                          jax.ShapeDtypeStruct((1024, 16), jnp.float32)).compile().as_text()
    # XLA's own: a wrapped_broadcast fusion of one constant, with no metadata (no op, no line).
    bare = [m.group(1) for m in re.finditer(r"^\s*%(wrapped_broadcast[\w.]*) = \S+ fusion\(%constant[\w.]*\), "
                                            r"kind=kLoop, calls=%[\w.]+$", text, re.M)]
    assert bare, "XLA no longer leaves a constant fill without metadata here"
    hlo = parse_hlo_module(text)
    for name in bare:
        ins = hlo.instruction(name)
        assert is_constant_fill(hlo, ins) and hlo.source_of(ins) is None
        consumer = fill_consumer(hlo, ins, lambda u: hlo.source_of(u) is not None)
        # Its reader in XLA's text (or, where a tuple packs it as a loop's initial carry, the tuple's reader: the
        # loop), whose line is this file's.
        readers = _readers(text, name)
        readers += [r for t in readers if t.startswith("tuple") for r in _readers(text, t)]
        assert consumer is not None and consumer.name in readers
        assert hlo.source_of(consumer).file == __file__
    # A fill with a line of its own is left as it is (its consumer is asked only where it has none).
    lined = [i for c in hlo.computations.values() for i in c.instructions
             if is_constant_fill(hlo, i) and hlo.source_of(i) is not None]
    assert lined
