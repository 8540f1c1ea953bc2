"""convolution_kernel on the stored CPU text of a ViT patch embedding's step whose HWIO kernel (8, 8, 3, 64) is
split on its height over model (fixtures/hlo/meaning/jax-X.Y/patch_embedding_step.hlo, both releases; no
compile). XLA gathers the kernel for the forward convolution and, for the kernel's gradient, trades with a
neighbour the image rows each half of a window reads (collective-permutes of the images, which reach the kernel
through no operand: issue 46).

The oracle is the text, read with regular expressions (never the tool's parser): the forward convolution is the
one ``convolution`` JAX's name stack names (the gradient's carries no op_name), inside a fusion whose operand its
kernel parameter is; that operand is the all-gather of the entry parameter JAX calls ``kernel``; the
convolution's window (``size=8x8``) and the images' channels (3: NCHW) are what it sums over."""

import re

import pytest
from stored_hlo import MEANING, computations, dims, entry_instructions, instructions, meaning_text, releases

from jax_shard_lint.passes.hlo.convolution_kernel import convolution_contracting, forward_name, named_convolution
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.hlo.value_origin import origin_index

# Imports no JAX (tests/test_jax_free_marker.py checks it): the newest-JAX leg of CI leaves it out.
pytestmark = pytest.mark.jax_free

RELEASES = releases(MEANING)
STORED = "patch_embedding_step"
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _forward(text):
    """(the convolution JAX's name stack names, its op_name, its fusion's operand that the kernel parameter is,
    its operands' shapes, its window's sizes), read from the text."""
    comps = computations(text)
    [(comp, line)] = [(c, line) for c, lines in comps.items() if c != "ENTRY" for line in lines
                      if " convolution(" in line and "op_name=" in line]
    conv = instructions([line])
    [(name, (_, _, [image, kernel], rest))] = conv.items()
    body = instructions(comps[comp])
    number = int(re.search(rf"%{re.escape(kernel)} = \S+ parameter\((\d+)\)", "\n".join(comps[comp])).group(1))
    entry = entry_instructions(text)
    [caller] = [n for n, (_, op, _, r) in entry.items() if op == "fusion" and f"calls=%{comp}," in r + ","]
    window = tuple(int(n) for n in re.search(r"window=\{size=([\dx]+)", rest).group(1).split("x"))
    return (name, _OP_NAME.search(rest).group(1), entry[caller][2][number], dims(body[image][0]),
            dims(body[kernel][0]), window)


@pytest.mark.parametrize("release", RELEASES)
def test_the_collectives_xla_emits_for_the_convolution_name_its_forward_convolution_and_kernel(release):
    """Every collective JAX's name stack ties to the convolution (the image rows' permutes, the gradient's
    all-reduce): the forward convolution, and its kernel as the entry computation's value (the
    fusion's operand: the gather of the parameter ``kernel``)."""
    text = meaning_text(release, STORED)
    module = parse_hlo_module(text)
    index = origin_index(module)
    conv, conv_name, kernel, _, _, _ = _forward(text)
    entry = entry_instructions(text)
    _, opcode, [gathered], _ = entry[kernel]
    assert opcode == "all-gather" and 'op_name="kernel"' in entry[gathered][3]
    collectives = {n: _OP_NAME.search(rest).group(1) for n, (_, op, _, rest) in entry.items()
                   if op in ("all-gather", "collective-permute", "all-reduce")
                   and _OP_NAME.search(rest).group(1).endswith("/conv_general_dilated")}
    # jax 0.10 names the kernel's gather for the convolution too; 0.12 for the parameter ("kernel").
    assert sorted(entry[n][1] for n in collectives if entry[n][1] != "all-gather") == [
        "all-reduce", "collective-permute", "collective-permute"]
    for name, op_name in collectives.items():
        found = named_convolution(module, op_name, index)
        assert found is not None and (found[0].name, found[1]) == (conv, kernel), name
    # The backward pass's name stack wraps the forward's: the permutes' transpose(jvp()) is the convolution's jvp().
    permute = next(op_name for n, op_name in collectives.items() if entry[n][1] == "collective-permute")
    assert "/transpose(jvp())/" in permute and forward_name(permute) == conv_name == permute.replace(
        "/transpose(jvp())/", "/jvp()/")


@pytest.mark.parametrize("release", RELEASES)
def test_ops_no_convolution_names_are_given_none(release):
    """The update (jit(...)/sub), ops with no name stack, a name no convolution carries."""
    text = meaning_text(release, STORED)
    module = parse_hlo_module(text)
    index = origin_index(module)
    entry = entry_instructions(text)
    [update] = [_OP_NAME.search(rest).group(1) for _, (_, op, _, rest) in entry.items()
                if op == "fusion" and "subtract" in " ".join(computations(text).get(
                    re.search(r"calls=%([\w.\-]+)", rest).group(1), []))]
    assert update.endswith("/sub")
    assert named_convolution(module, update, index) is None
    assert named_convolution(module, None, index) is None and named_convolution(module, "", index) is None
    assert named_convolution(module, "jit(other)/jvp()/conv_general_dilated", index) is None


@pytest.mark.parametrize("release", RELEASES)
def test_the_convolution_sums_over_the_kernels_window_and_input_features(release):
    """The kernel's dimensions it contracts: those of the window's sizes (8x8 in XLA's text) and of the images'
    channels (3, the images' dimension 1: NCHW); the one left has the kernel's 64 output features. The input's:
    its dimension of those channels (the image's rows and columns slide)."""
    text = meaning_text(release, STORED)
    module = parse_hlo_module(text)
    conv_name, _, _, image, kernel, window = _forward(text)
    channels = dims(next(shape for shape, _, _, rest in entry_instructions(text).values()
                         if 'op_name="images"' in rest))[1]
    conv = module.instruction(conv_name)
    on_kernel = convolution_contracting(conv, 1)
    assert sorted(kernel[d] for d in on_kernel) == sorted((*window, channels)) and len(on_kernel) == 3
    assert [kernel[d] for d in range(len(kernel)) if d not in on_kernel] == [64]
    on_image = convolution_contracting(conv, 0)
    assert [image[d] for d in on_image] == [channels] and image.count(channels) == 1
    # No third operand; a convolution without dim_labels says nothing.
    assert convolution_contracting(conv, 2) is None
    assert convolution_contracting(module.instruction(_entry_name(text, "all-gather")), 1) is None


def _entry_name(text, opcode):
    return next(n for n, (_, op, _, _) in entry_instructions(text).items() if op == opcode)
