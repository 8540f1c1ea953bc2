"""The 'produced by' text of an op: XLA's op names as its compiled text writes them."""

import pytest

from jax_shard_lint.reports.common.tensor_text import short_op_name

pytestmark = pytest.mark.jax_free


@pytest.mark.parametrize("op_name, text", [
    # ott-jax's Sinkhorn error check, jax 0.10.2 and 0.12 (newbie18 F8): an op XLA made of three JAX ops names
    # them in brackets joined by ':'; the report cut inside the brackets ("reduce_sum) in dot_general:...").
    ("jit(ot_step)/while/body/while/body/closed_call/cond/branch_1_fun/vmap(vmap())/"
     "(dot_general:reduce_sum:reduce_sum)", "dot_general + reduce_sum"),
    ("jit(ot_step)/while/body/while/body/eval_jaxpr/cond/branch_1_fun/vmap(vmap())/"
     "(dot_general:reduce_sum:reduce_sum)", "dot_general + reduce_sum"),
    ("jit(batched_ot)/vmap(vmap())/(dot_general:vmap(vmap())/reduce_sum:vmap(vmap())/reduce_sum)",
     "dot_general + reduce_sum"),
    ("jit(step)/transpose(jvp(jit(log_softmax)))/reduce_sum", "reduce_sum in log_softmax (backward)"),
    ("jit(step)/while/body/closed_call/mlp/dot_general", "dot_general in mlp"),
    ("jit(step)/while/body/eval_jaxpr/dot_general", "dot_general"),  # 0.12's closed_call
])
def test_short_op_name(op_name, text):
    assert short_op_name(op_name) == text
