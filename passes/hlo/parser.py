"""Parse the text of a compiled HLO module (``compiled.as_text()`` or XLA's
``*after_optimizations.txt`` dump) into the HloModule of module.py, and check
once the fields later passes read as numbers.
"""
from __future__ import annotations

import gc
import re

from ..models.errors import HloParseError
from .attributes import balanced_end, open_brackets, split_top_level
from .module import MAIN_THREAD, HloComputation, HloInstruction, HloModule, StackFrame

_COMPUTATION_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*)\{\s*$")
_TABLE_ENTRY = re.compile(r"^(\d+)\s+(.*)$")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*(\[[^\]]*\])?(\{[^}]*\})?")

_HEAD = re.compile(r"(ROOT )?%?([\w.\-]+) = ([a-z][a-z0-9]*(?:\[[^\]]*\])?(?:\{[^}]*\})?) ([\w\-]+)\(")
_OPERAND = re.compile(r"%([\w.\-]+)")
_WHOLE = re.compile(_HEAD.pattern + r'([^()"]*)\)')


def parse_instruction(line: str) -> HloInstruction:
    return _parse_stripped(line.strip())


def _parse_stripped(text: str) -> HloInstruction:
    line = text
    m = _WHOLE.match(text)
    if m:  # the common case in one match: an array shape and an operand list without parentheses
        root, name, shape, opcode, ops = m.groups()
        operands = tuple(_OPERAND.findall(ops)) if "%" in ops else tuple(
            t.split()[-1] for t in ops.split(",") if t.strip())
        return HloInstruction(name, opcode, shape, operands, text[m.end():], root is not None)
    m = _HEAD.match(text)
    if m:
        is_root, name, shape, opcode = m.group(1) is not None, m.group(2), m.group(3), m.group(4)
        rest, paren = text, m.end() - 1
    else:
        is_root = text.startswith("ROOT ")
        if is_root:
            text = text[5:]
        eq = text.find(" = ")
        if eq < 0:
            raise HloParseError(f"not an instruction: {line.strip()[:120]}")
        name = text[:eq].strip().lstrip("%")
        rest = text[eq + 3 :].lstrip()
        if rest.startswith("("):
            shape_end = balanced_end(rest, 0)
        else:
            sm = _ARRAY_SHAPE.match(rest)
            if not sm:
                raise HloParseError(f"no shape in: {line.strip()[:120]}")
            shape_end = sm.end()
        shape = rest[:shape_end]
        rest = rest[shape_end:].lstrip()
        paren = rest.find("(")
        if paren < 0:
            raise HloParseError(f"no opcode in: {line.strip()[:120]}")
        opcode = rest[:paren].strip()
    close = rest.find(")", paren)
    inner = rest[paren + 1 : close] if close > 0 else "("
    # The operand list usually holds no nested parenthesis or string: its end is the next ')'.
    ops_end = close + 1 if "(" not in inner and '"' not in inner else balanced_end(rest, paren)
    operand_text = rest[paren + 1 : ops_end - 1]
    if "%" in operand_text:  # printed operands are %names (with their shapes in dumps)
        operands = tuple(_OPERAND.findall(operand_text))
    else:  # parameter(0), constant(1.5), get-tuple-element index forms
        operands = tuple(tok.split()[-1] for tok in split_top_level(operand_text) if tok.split())
    return HloInstruction(name, opcode, shape, operands, rest[ops_end:], is_root)


_C_ESCAPES = {"n": 10, "t": 9, "r": 13, '"': 34, "\\": 92, "'": 39, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}


def c_string(text: str) -> str:
    """A string as XLA prints it (C escapes, non-ASCII bytes as octal ``\\303\\251``)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    if "\\" not in text:
        return text
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < n and j < i + 4 and text[j] in "01234567":
                j += 1
            out.append(int(text[i + 1:j], 8) & 0xFF)
            i = j
        elif nxt == "x":
            j = i + 2
            while j < n and j < i + 4 and text[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(text[i + 2:j] or "0", 16) & 0xFF)
            i = j
        else:
            out.append(_C_ESCAPES.get(nxt, ord(nxt) if ord(nxt) < 128 else 63))
            i += 2
    return out.decode("utf-8", errors="replace")


def _parse_tables(lines: list[str]) -> dict[int, StackFrame]:
    tables: dict[str, dict[int, str]] = {}
    current = None
    for line in lines:
        s = line.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(s, {})
            continue
        m = _TABLE_ENTRY.match(s)
        if current is not None and m:
            current[int(m.group(1))] = m.group(2)
    files = {k: c_string(v) for k, v in tables.get("FileNames", {}).items()}
    funcs = {k: c_string(v) for k, v in tables.get("FunctionNames", {}).items()}
    locs = {}
    for k, v in tables.get("FileLocations", {}).items():
        fields = dict(re.findall(r"(\w+)=(-?\d+)", v))
        locs[k] = fields
    frames: dict[int, StackFrame] = {}
    for k, v in tables.get("StackFrames", {}).items():
        fields = {a: int(b) for a, b in re.findall(r"(\w+)=(-?\d+)", v)}
        loc = locs.get(fields.get("file_location_id", -1))
        if loc is None:
            continue
        # The printed parent id is one past the parent's table id; 1 means no parent.
        parent = fields.get("parent_frame_id", 0) - 1
        frames[k] = StackFrame(
            file=files.get(int(loc.get("file_name_id", 0)), "<unknown>"),
            function=funcs.get(int(loc.get("function_name_id", 0)), ""),
            line=int(loc.get("line", 0)),
            parent=parent if parent > 0 else None,
        )
    return frames


def parse_hlo_module(text: str) -> HloModule:
    # Tens of thousands of small objects and no cycles: the cyclic collector would
    # only rescan them over and over while they are built.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_hlo_module(text)
    finally:
        if enabled:
            gc.enable()


def _parse_hlo_module(text: str) -> HloModule:
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    if not first.startswith("HloModule "):
        raise HloParseError("not an HLO module: the text does not start with 'HloModule'")
    head = first[len("HloModule ") :]
    mod_name, _, attr_text = head.partition(",")
    header_attrs = {}
    for part in split_top_level(attr_text):
        k, _, v = part.partition("=")
        header_attrs[k.strip()] = v.strip()

    computations: dict[str, HloComputation] = {}
    entry = None
    table_lines: list[str] = []
    current_instrs: list[HloInstruction] = []
    current_name, current_entry = None, False
    parse = _parse_stripped
    append = None
    pending = ""  # an instruction printed over several lines, until its brackets close
    for line in lines[1:]:
        s = line.strip()
        if pending:
            pending += "\n" + s
            if open_brackets(pending) <= 0:
                append(parse(pending))  # type: ignore[misc]  # pending is only set inside a computation
                pending = ""
            continue
        if not s or s.startswith("//"):
            continue
        if append is not None and s[0] != "}":  # inside a computation: an instruction (the common case)
            # A string attribute with a line break (a Pallas kernel's ``kernel_metadata={`` then
            # ``"xprof_metadata":...`` on the next line) continues the instruction; counting
            # brackets first keeps the exact check off the common line.
            if (s.count("{") != s.count("}") or s.count("(") != s.count(")")) and open_brackets(s) > 0:
                pending = s
                continue
            append(parse(s))
            continue
        if current_name is None:
            m = _COMPUTATION_HEADER.match(s)
            if m and "->" in s:
                current_name, current_entry, current_instrs = m.group(2), bool(m.group(1)), []
                append = current_instrs.append
            else:
                table_lines.append(s)
            continue
        if s == "}" or s.startswith("},"):
            # A computation's own attributes follow its brace: `}, execution_thread="sparsecore"` for work
            # XLA runs on a TPU's SparseCores (libtpu 0.0.50+).
            thread = _computation_thread(s[2:]) if len(s) > 1 else MAIN_THREAD
            computations[current_name] = HloComputation(current_name, current_entry, tuple(current_instrs), thread)
            if current_entry:
                entry = current_name
            current_name, append = None, None
            continue
        current_instrs.append(parse(s))
    if current_name is not None:
        raise HloParseError(f"computation {current_name} is not closed"
                            + (f": an instruction's brackets never close: {pending[:120]}" if pending else ""))
    if entry is None:
        raise HloParseError("the HLO module has no ENTRY computation")
    by_name = {i.name: i for c in computations.values() for i in c.instructions}
    module = HloModule(mod_name.strip(), header_attrs, computations, entry, _parse_tables(table_lines), by_name)
    _check_numbers(module)
    return module


def _computation_thread(attr_text: str) -> str:
    attrs = {}
    for part in split_top_level(attr_text):
        key, _, value = part.partition("=")
        attrs[key.strip()] = value.strip().strip('"')
    thread = attrs.get("execution_thread", MAIN_THREAD)
    if not thread.replace("_", "").isalnum():
        raise HloParseError(f"execution_thread={thread[:40]!r} is not a thread name")
    return thread


def _check_numbers(module: HloModule) -> None:
    """The fields later passes read as numbers are numbers, and every replica
    group is readable and of a sane size: a malformed module fails here, once,
    with the instruction named, not deep inside an analysis."""
    from ..common.device_groups import MAX_GROUP_DEVICES, DeviceGroupError, MalformedDeviceGroups, parse_replica_groups

    if not re.fullmatch(r"\d+", module.header_attrs.get("num_partitions", "1")):
        raise HloParseError(f"num_partitions={module.header_attrs['num_partitions']} is not a number")
    num_devices = int(module.header_attrs.get("num_partitions", "1"))
    if num_devices > MAX_GROUP_DEVICES:
        raise HloParseError(f"num_partitions={num_devices} is more than {MAX_GROUP_DEVICES} devices")
    for comp in module.computations.values():
        for ins in comp.instructions:
            if ins.opcode == "parameter" and not (len(ins.operands) == 1 and ins.operands[0].isdigit()):
                raise HloParseError(f"%{ins.name}: parameter({', '.join(ins.operands)}) is not a parameter number")
            if ins.opcode == "while":
                ins.known_trip_count()
            if "replica_groups=" in ins.attr_text:
                try:
                    parse_replica_groups(ins.replica_groups_text(), num_devices)
                except MalformedDeviceGroups as e:
                    raise HloParseError(f"%{ins.name}: {e}") from None
                except DeviceGroupError:  # a form this parser does not read: the collectives pass says so
                    pass
