"""XLA's compiled texts stored in fixtures, read as text (no compile), and the facts the collective-meaning
tests take from them with regular expressions of their own (never the tool's parser): an instruction's
line, its operands and users, the entry parameters with the paths JAX's metadata gives them.

fixtures/hlo/meaning/jax-X.Y/ holds small CPU programs on a (data 4, model 2) mesh
(fixtures/generate_meaning_texts.py); fixtures/compiled/jax-X.Y/ the TPU and GPU steps
(fixtures/generate_compiled_texts.py). Every stored release is read on every JAX the suite runs on."""

from __future__ import annotations

import glob
import gzip
import os
import re
from math import prod

from conftest import FIXTURES

from jax_shard_lint.passes.common.device_groups import MeshInfo
from jax_shard_lint.passes.hlo.collectives import find_collectives
from jax_shard_lint.passes.hlo.module import HloModule
from jax_shard_lint.passes.hlo.parser import parse_hlo_module
from jax_shard_lint.passes.models.report import Collective, TensorInfo

MEANING = os.path.join(FIXTURES, "hlo", "meaning")
# The tensor-parallel pairs compiled for compile-only H100 devices (generate_meaning_texts.py --platform h100).
MEANING_H100 = os.path.join(FIXTURES, "hlo", "meaning-h100")
COMPILED = os.path.join(FIXTURES, "compiled")
DATA_MODEL = MeshInfo((("data", 4), ("model", 2)))
_WIDTH = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "pred": 1}
LINE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\((.*?)\)(.*)$")
_PARAMETER = re.compile(r"^\s*%[\w.\-]+ = (\w+)\[([\d,]*)\]\S* parameter\((\d+)\).*?op_name=\"((?:[^\"\\]|\\.)*)\"")


def releases(folder: str = MEANING) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "jax-*")))


def meaning_text(release: str, name: str, folder: str = MEANING) -> str:
    with open(os.path.join(folder, release, f"{name}.hlo"), encoding="utf-8") as f:
        return f.read()


def meaning_program(release: str, name: str) -> tuple[str, HloModule, list[Collective]]:
    """A stored program's text, its parsed module and the collectives found in it over DATA_MODEL: what each
    stored-text test of a collective pass reads before its own pass runs."""
    text = meaning_text(release, name)
    module = parse_hlo_module(text)
    return text, module, find_collectives(module, DATA_MODEL).collectives


def compiled_text(release: str, name: str) -> str:
    with gzip.open(os.path.join(COMPILED, release, f"{name}.hlo.gz"), "rt", encoding="utf-8") as f:
        return f.read()


def stored_text(path: str) -> str:
    """A stored text by its path: a meaning folder's ``.hlo``, or fixtures/compiled's ``RELEASE/NAME.hlo.gz``."""
    if path.endswith(".gz"):
        return compiled_text(os.path.basename(os.path.dirname(path)), os.path.basename(path)[: -len(".hlo.gz")])
    with open(path, encoding="utf-8") as f:
        return f.read()


def called_instructions(comps: dict[str, list[str]]) -> dict[str, tuple[str, str, list[str], str]]:
    """Every instruction of the computations other than the entry (fusion bodies, loop bodies), by name."""
    return {n: v for name, lines in comps.items() if name != "ENTRY" for n, v in instructions(lines).items()}


def computations(text: str) -> dict[str, list[str]]:
    """computation name -> its instruction lines; the entry's is also under 'ENTRY'."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$", line)
        if m:
            current = out.setdefault(m.group(2), [])
            if m.group(1):
                out["ENTRY"] = current
        elif current is not None and LINE.match(line):
            current.append(line)
    return out


def instructions(lines: list[str]) -> dict[str, tuple[str, str, list[str], str]]:
    """name -> (shape, opcode, operand names, the rest of the line)."""
    out = {}
    for line in lines:
        name, shape, opcode, operands, rest = LINE.match(line).groups()
        out[name] = (shape, opcode, re.findall(r"%([\w.\-]+)", operands), rest)
    return out


def entry_instructions(text: str) -> dict[str, tuple[str, str, list[str], str]]:
    """``instructions`` of the ENTRY computation."""
    return instructions(computations(text)["ENTRY"])


def dims(shape: str) -> tuple[int, ...]:
    return tuple(int(d) for d in re.match(r"\w+\[([\d,]*)\]", shape).group(1).split(",") if d)


def entry_inputs(text: str, mesh: MeshInfo, specs: dict[str, tuple[tuple[str, ...], ...]]) -> tuple[TensorInfo, ...]:
    """The entry parameters as the analysis gets them: number, path (JAX's op_name), global shape (the
    per-device shape the text prints times the mesh axes of the PartitionSpec the program states,
    ``specs`` by path; an unstated one is replicated)."""
    sizes = dict(mesh.axes)
    out = []
    for line in computations(text)["ENTRY"]:
        m = _PARAMETER.match(line)
        if not m:
            continue
        dtype, local, number, path = m.groups()
        path = path.replace("\\'", "'")
        local_dims = [int(d) for d in local.split(",") if d]
        spec = list(specs.get(path, ())) + [()] * (len(local_dims) - len(specs.get(path, ())))
        shape = [n * prod(sizes[a] for a in axes) for n, axes in zip(local_dims, spec)]
        out.append(TensorInfo(index=int(number), path=path, shape=shape, dtype=dtype,
                              sharding=[list(a) for a in spec], bytes=prod(shape) * _WIDTH[dtype],
                              per_device_bytes=prod(local_dims) * _WIDTH[dtype]))
    return tuple(sorted(out, key=lambda t: t.index))


# The PartitionSpecs fixtures/generate_meaning_texts.py gives each program's arguments.
MEANING_SPECS = {
    "weight_on_the_right": {"w": (("data",), ()), "x": (("data",), ())},
    "weight_on_the_left": {"w": (("data",), ()), "x": (("data",), ())},
    "row_parallel": {"w": (("model",), ()), "x": ((), ("model",))},
    "gathered_activation": {"w": ((), ("model",)), "x": (("data",), ())},
    "looks_up_rows": {"table": (("data",), ())},
    "looks_up_columns": {"table": ((), ("data",))},
    "fsdp_train_step": {"w": (("data",), ()), "x": (("data",), ())},
    "gathers_for_one_output": {"w": (("data",), ())},
    "returns_a_gathered_weight": {"w": (("data",), ())},
    "reshards_a_weight": {"w": (("data",), ())},
    "scans_over_layers": {"ws": ((), ("data",), ())},
    "scans_over_square_layers": {"ws": ((), (), ("data",))},
    "returns_tanh_of_a_gather": {"w": (("data",), ())},
    "casts_a_gathered_weight": {"w": (("data",), ()), "x": (("data",), ())},
    "gathers_in_a_branch": {"w": (("data",), ()), "x": (("data",), ())},
    "gated_pair": {"gate": ((), ("model",)), "up": ((), ("model",)), "down": (("model",), ()), "x": (("data",), ())},
    "activation_pair": {"up": ((), ("model",)), "down": (("model",), ()), "x": (("data",), ())},
    "gathered_between_pair": {"up": ((), ("model", "data")), "down": (("model",), ())},
    "widening_pair": {"up": ((), ("model",)), "down": (("model",), ()), "x": (("data",), ())},
    "head_on_both_axes": {"w": (("data",), ("model",))},
    "narrowing_pair": {"up": ((), ("model",)), "down": (("model",), ()), "x": (("data",), ())},
    "converted_pair": {"up": ((), ("model",)), "down": (("model",), ()), "x": (("data",), ())},
    "contracts_both_axes": {"w": (("data", "model"), ())},
    "sums_then_multiplies": {"w": ((), ("model",)), "x": ((), ("data",))},
    "gathers_a_vector": {"v": (("data",),)},
    "carries_a_gathered_weight": {"w": (("data",), ())},
    "gathers_a_column_of_a_stack": {"ws": ((), (), ("data",))},
    "combined_sums": {"w_in": ((), ("model",)), "w_out": (("model",), ()), "embed": (("model",), ()),
                      "u": (("model",), ()), "x": (("data",), ()), "h": ((), ("model",)), "first": (("data",),),
                      "second": (("data",),)},
    "pair_stack_train_step": {"up1": ((), ("model",)), "down1": (("model",), ()), "up2": ((), ("model",)),
                              "down2": (("model",), ()), "x": (("data",), ())},
    "attention_pair": {"q": ((), ("model",)), "k": ((), ("model",)), "v": ((), ("model",)), "o": (("model",), ()),
                       "x": (("data",), ())},
}


def megatron_specs(text: str) -> dict[str, tuple[tuple[str, ...], ...]]:
    """The PartitionSpecs examples/models/mesh_util.py's megatron_spec gives a stored step's arguments (the
    nnx_transformer of generate_meaning_texts.py's STEPS), by path: a matrix whose path names 'up' P(None,
    'model'), any other matrix (down, the embedding, their optimizer state) P('model', None), anything else
    replicated; the tokens P('data')."""
    specs: dict[str, tuple[tuple[str, ...], ...]] = {}
    for line in computations(text)["ENTRY"]:
        if m := _PARAMETER.match(line):
            path, ndim = m.group(4).replace("\\'", "'"), len([d for d in m.group(2).split(",") if d])
            specs[path] = (("data",),) if path == "tokens" else ((), ("model",)) if ndim == 2 and "up" in path \
                else (("model",), ()) if ndim == 2 else ()
    return specs


def meaning_inputs(release: str, name: str, folder: str = MEANING) -> tuple[TensorInfo, ...]:
    text = meaning_text(release, name, folder)
    return entry_inputs(text, DATA_MODEL, MEANING_SPECS[name] if name in MEANING_SPECS else megatron_specs(text))


def parameter_number(text: str, path: str) -> int:
    """The entry parameter JAX's metadata names ``path``."""
    [number] = [int(m.group(3)) for line in computations(text)["ENTRY"] if (m := _PARAMETER.match(line))
                and m.group(4).replace("\\'", "'") == path]
    return number


# The meshes and PartitionSpecs (by the leaf's key) the examples give the stored steps' arguments.
FSDP_TP = MeshInfo((("fsdp", 4), ("tp", 2)))
FSDP = MeshInfo((("fsdp", 8),))
_STEP_SPECS = {
    "fsdp-tp": (FSDP_TP, {"embed": (), "mix": ((), ("fsdp",), ("tp",)), "up": ((), ("fsdp",), ("tp",)),
                          "down": ((), ("tp",), ("fsdp",)), "tokens": (("fsdp",),)}),
    "llama": (FSDP, {"token_embedder": ((), ("fsdp",)), "out": ((), (), (), ("fsdp",)), "final_norm": (),
                     "pre_norm": (), "post_norm": (), "*": (("fsdp",),)}),
    "maxtext-like-scan": (FSDP, {"embedding": ((), ("fsdp",)), "*": (("fsdp",),)}),
}


def step_inputs(text: str, name: str) -> tuple[MeshInfo, tuple[TensorInfo, ...]]:
    """A stored step's mesh and arguments (``name`` is PROGRAM.PLATFORM, as in its MANIFEST)."""
    mesh, by_leaf = _STEP_SPECS[name.split(".")[0].split("-")[0] if name.startswith("llama") else name.split(".")[0]]
    paths = [m.group(4).replace("\\'", "'") for line in computations(text)["ENTRY"] if (m := _PARAMETER.match(line))]
    specs = {p: by_leaf.get(re.findall(r"\['([^']+)'\]", p)[-1] if "[" in p else p, by_leaf.get("*", ()))
             for p in paths}
    return mesh, entry_inputs(text, mesh, specs)


# Once per transfer: the oracle of the collectives' count on TPU and GPU texts (an async collective's
# start, continuations and done share its channel id, and libtpu's chain_id).
_LINE = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) (all-gather|all-reduce|reduce-scatter|all-to-all|"
                   r"collective-permute|collective-broadcast|ragged-all-to-all)(-start)?\((.*)$", re.M)
_DONE = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (.*?) [\w\-]+-done\(%([\w.\-]+)\)", re.M)
_ARRAY = re.compile(r"\b(f32|bf16|s32|u32|f16|s8|u8|pred|s64|u64|f64|f8e4m3fn|f8e5m2)\[([\d,]*)\]")
_WIDTH = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "f16": 2, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "u64": 8,
          "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1}
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$")
_CALLED = re.compile(r"(?:calls|body|condition|to_apply|true_computation|false_computation)=%([\w.\-]+)")
_LOOP_BODY = re.compile(r"(?:body|condition)=%([\w.\-]+)")


def _bytes(shape_text):
    total = 0
    for dtype, dims in _ARRAY.findall(shape_text):
        size = _WIDTH[dtype]
        for d in filter(None, dims.split(",")):
            size *= int(d)
        total += size
    return total


def transfers(hlo):
    """{transfer key: (kind, per-device bytes, whether a piece of it runs outside every loop)} from the compiled
    text: clones of one collective share its channel id (and chain id); an async start's bytes are its
    done's result."""
    done_shape = {start: shape for shape, start in _DONE.findall(hlo)}
    computation_of, called, current = {}, {}, None
    for line in hlo.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = m.group(2)
            called[current] = set()
        elif current and " = " in line:
            computation_of[line.split(" = ")[0].strip().removeprefix("ROOT ").lstrip("%")] = current
            called[current] |= set(_CALLED.findall(line))
    in_loop = set()
    work = [c for line in hlo.splitlines() if " while(" in line for c in _LOOP_BODY.findall(line)]
    while work:
        c = work.pop()
        if c not in in_loop:
            in_loop.add(c)
            work.extend(called.get(c, ()))
    out = {}
    for name, shape, kind, start, rest in _LINE.findall(hlo):
        channel = re.search(r"channel_id=(\d+)", rest)
        chain = re.search(r'chain_id="(\d+)"', rest)
        key = (channel.group(1), chain.group(1) if chain else None) if channel else name
        if start:
            nbytes = _bytes(done_shape[name]) if name in done_shape else _bytes(shape) // 2
        else:
            nbytes = _bytes(shape)
        kind_, nbytes_, outside = out.get(key, (kind, nbytes, False))
        assert (kind_, nbytes_) == (kind, nbytes), f"channel {key}: pieces of two shapes"
        out[key] = (kind, nbytes, outside or computation_of[name] not in in_loop)
    return out
