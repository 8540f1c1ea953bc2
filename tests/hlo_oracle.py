"""Oracles the tests read from XLA's compiled text with regular expressions of their own (never the
tool's parser): per-device bytes of a shape, every collective instruction's kind, bytes and group size."""

import re

import numpy as np

_DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1, "f64": 8, "s64": 8}
ARRAY = re.compile(r"\b(f32|bf16|f16|s32|u32|s8|u8|pred|f64|s64)\[([\d,]*)\]")


def array_bytes(shape_text: str) -> int:
    total = 0
    for dtype, dims in ARRAY.findall(shape_text):
        total += _DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
    return total


_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%([\w.\-]+) = (.+?) (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)"
    r"(-start)?\((.*)$", re.M)


def _group_size(attrs: str, devices: int) -> int:
    """The size of a collective's first replica group, as XLA printed it: ``{{0,1},{2,3}}``, the
    iota form ``[groups,size]<=[...]`` or the mesh form ``mesh['a'=2,'b'=4] {'a'}``; a permute's is 2."""
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
    if mesh:  # mesh['axis_0'=2,'axis_1'=4] {'axis_0'}: the named axes' (or sub-axes') sizes multiplied
        sizes = {name: int(n) for name, n in re.findall(r"'([^']+)'=(\d+)", mesh.group(1))}
        size = 1
        for item in filter(None, (s.strip() for s in mesh.group(2).split(","))):
            sub = re.fullmatch(r"'([^']+)':\((\d+)\)(\d+)", item)
            size *= int(sub.group(3)) if sub else sizes[item.strip("'")]
        return size
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if iota:
        return int(iota.group(2))
    listed = re.search(r"replica_groups=\{\{([\d,]*)\}", attrs)
    if listed:
        return len(listed.group(1).split(","))
    return devices  # replica_groups={}: every device


def compiled_collectives(text: str, devices: int) -> dict[str, tuple[str, int, int]]:
    """name -> (kind, bytes one device receives per run, group size), from the compiled text. An async
    start's shape is (operands, results[, scratch]): its result is the second element."""
    out = {}
    for name, shape, kind, start, rest in _INSTRUCTION.findall(text):
        if start and shape.startswith("("):
            depth, parts, cur = 0, [], ""
            for ch in shape[1:-1]:
                depth += ch in "([{"
                depth -= ch in ")]}"
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += ch
            parts.append(cur)
            shape = parts[1]
        size = 2 if kind == "collective-permute" else _group_size(rest, devices)
        out[name] = (kind, array_bytes(shape), size)
    return out




_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$")
_CALLEE = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def computation_runs(text: str) -> dict[str, int]:
    """How many times each computation runs per execution of ENTRY: a while body known_trip_count times
    per run of its caller (its condition once more), anything else called once per run of its caller."""
    edges: list[tuple[str, str, int]] = []  # caller, callee, runs per run of the caller
    entry, current = None, None
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = m.group(2)
            entry = current if m.group(1) else entry
            continue
        if current is None or " = " not in line:
            continue
        trip = _TRIP.search(line)
        for attr, callee in _CALLEE.findall(line):
            n = 1
            if attr in ("body", "condition"):
                assert trip, f"a loop without known_trip_count: {line.strip()[:120]}"
                n = int(trip.group(1)) + (attr == "condition")
            edges.append((current, callee, n))
        for branches in _BRANCHES.findall(line):
            edges.extend((current, b.strip().lstrip("%"), 1) for b in branches.split(","))
    runs: dict[str, int] = {}

    def count(name: str) -> int:
        if name not in runs:
            runs[name] = 1 if name == entry else sum(count(c) * n for c, callee, n in edges if callee == name)
        return runs[name]

    names = {entry} | {callee for _, callee, _ in edges}
    return {name: count(name) for name in names if name}


def collectives_per_step(text: str, devices: int) -> dict[str, tuple[str, int, int, int]]:
    """name -> (kind, bytes, group size, runs per step): compiled_collectives with its computation's runs."""
    runs = computation_runs(text)
    where, current = {}, None
    for line in text.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = m.group(2)
        elif current:
            i = re.match(r"^\s*(?:ROOT )?%([\w.\-]+) = ", line)
            if i:
                where[i.group(1)] = current
    return {name: (kind, nbytes, size, runs.get(where[name], 0))
            for name, (kind, nbytes, size) in compiled_collectives(text, devices).items()}


def collective_bytes_per_step(text: str) -> int:
    """Every collective's bytes per device times its runs per step: what a step moves, from XLA's text."""
    return sum(b * runs for _, b, _, runs in collectives_per_step(text, 0).values())


def xla_peak(compiled) -> int:
    """XLA's per-device peak of a compiled program: its memory_analysis()'s arguments, outputs and
    temporaries, less the donated (aliased) bytes counted twice."""
    m = compiled.memory_analysis()
    return m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes


def step_traffic(compiled, state) -> int:
    """Per-device bytes a step moves as the tests count it from XLA: every collective instruction's result
    in the compiled text, and each state output (``state``: the state arguments, leading the arguments and
    returned as the leading results, ShapeDtypeStructs) that the compiled program returns on another
    sharding than its input's, which the next step reshards on entry (its per-device bytes)."""
    import jax

    # The group size does not enter the bytes (0: unused); a collective in a loop counts once per trip.
    total = sum(b * runs for _, b, _, runs in collectives_per_step(compiled.as_text(), 0).values())
    outputs = jax.tree.leaves(compiled.output_shardings[:len(state)])
    # A leaf given no sharding (None: penzai's sharding_util leaves an unnamed optimizer leaf so) enters on the
    # layout XLA chose for it, its compiled input sharding.
    leaves = jax.tree.leaves(state)
    chosen = jax.tree.leaves(compiled.input_shardings[0][:len(state)])
    for x, entered, out in zip(leaves, chosen, outputs, strict=True):
        if not out.is_equivalent_to(x.sharding or entered, len(x.shape)):
            total += x.dtype.itemsize * int(np.prod(out.shard_shape(x.shape), dtype=np.int64))
    return total
