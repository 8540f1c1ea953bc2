"""Parse the text of a compiled HLO module (``compiled.as_text()`` or XLA's
``*after_optimizations.txt`` dump) into computations, instructions and the
stack-frame tables that ``stack_frame_id`` indexes.

Only what the passes need is parsed: names, shapes, opcodes, operands, the
attributes that name called computations, metadata and backend_config.
"""

from __future__ import annotations

import gc
import json
import re
from dataclasses import dataclass, field

from .frames import DEFAULT_OWNERSHIP, CodeOwnership
from .models import SourceLocation

_METADATA_STR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_METADATA_INT = re.compile(r"(\w+)=(-?\d+)(?=[\s}]|$)")
_COMPUTATION_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*)\{\s*$")
_TABLE_ENTRY = re.compile(r"^(\d+)\s+(.*)$")
_COMPUTATION_REF = re.compile(r"%?([\w.\-]+)")
_UNESCAPE = re.compile(r"\\(.)")
# A called computation without parsing the whole attribute list (metadata included).
_CALL_TARGET = re.compile(r"\{[^}]*\}|%?[\w.\-]+")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*(\[[^\]]*\])?(\{[^}]*\})?")

# Attributes whose values name other computations.
_CALL_ATTRS = (
    "calls", "to_apply", "body", "condition", "branch_computations",
    "true_computation", "false_computation", "called_computations",
)
_CALL_KEYS = tuple(key + "=" for key in _CALL_ATTRS)
_MAY_CALL = re.compile(r"\b(?:" + "|".join(_CALL_ATTRS) + r")=")


class HloParseError(ValueError):
    """The text is not an HLO module this parser understands."""


class HloInstruction:
    """One instruction, read-only. ``attrs`` and ``metadata`` are parsed from the
    text after the operands on first use: most instructions are never asked.
    (A slotted class: a module has tens of thousands of these.)"""

    __slots__ = ("name", "opcode", "shape", "operands", "attr_text", "is_root", "_attrs", "_metadata", "_called")

    def __init__(self, name: str, opcode: str, shape: str, operands: tuple[str, ...], attr_text: str,
                 is_root: bool = False):
        self.name, self.opcode, self.shape, self.operands = name, opcode, shape, operands
        self.attr_text, self.is_root = attr_text, is_root
        self._attrs: dict[str, str] | None = None
        self._metadata: dict[str, str | int] | None = None
        self._called: list[tuple[str, str]] | None = None

    def __repr__(self) -> str:
        return f"HloInstruction({self.name!r}, {self.opcode!r}, {self.shape!r})"

    def _parse(self) -> None:
        self._attrs, self._metadata = _parse_attrs(self.attr_text)

    @property
    def attrs(self) -> dict[str, str]:
        if self._attrs is None:
            self._parse()
        return self._attrs  # type: ignore[return-value]

    @property
    def metadata(self) -> dict[str, str | int]:
        if self._metadata is None:
            self._parse()
        return self._metadata  # type: ignore[return-value]

    @property
    def op_name(self) -> str | None:
        v = self.metadata.get("op_name")
        return str(v) if v is not None else None

    def backend_config(self) -> dict:
        raw = self.attrs.get("backend_config")
        if not raw:
            return {}
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return cfg if isinstance(cfg, dict) else {}

    def known_trip_count(self) -> int | None:
        """XLA's ``backend_config={"known_trip_count":{"n":"5"}}`` on a while loop
        (proto JSON writes int64 as a string), or None when XLA did not know it.
        Raises HloParseError for anything else: a count later passes multiply by."""
        trip = self.backend_config().get("known_trip_count")
        if trip is None:
            return None
        n = trip.get("n") if isinstance(trip, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            return n
        if isinstance(n, str) and n.isascii() and n.isdigit() and len(n) <= 18:
            return int(n)
        raise HloParseError(f"%{self.name}: known_trip_count {json.dumps(trip)[:80]} is not "
                            '{"n": a count of iterations}')

    def called(self) -> list[tuple[str, str]]:
        """(attribute, computation name) for every computation this instruction
        calls (worked out once: every pass over the module asks)."""
        if self._called is None:
            self._called = self._find_called()
        return self._called

    def _find_called(self) -> list[tuple[str, str]]:
        text = self.attr_text
        # Substring tests first: most instructions call nothing, and a regex over
        # their metadata costs more than the rest of the parse.
        if "=" not in text or not any(key in text for key in _CALL_KEYS) or not _MAY_CALL.search(text):
            return []
        cut = text.find("metadata={")  # metadata strings could mention "calls="
        head = text if cut < 0 else text[:cut]
        found: dict[str, str] = {}
        for key in _CALL_ATTRS:
            at = head.find(key + "=")
            if at >= 0 and (at == 0 or head[at - 1] in " ,"):
                m = _CALL_TARGET.match(head, at + len(key) + 1)
                if m:
                    found[key] = m.group()
        found = found or self.attrs
        out = []
        for key in _CALL_ATTRS:
            value = found.get(key)
            if value:
                for m in _COMPUTATION_REF.finditer(value.strip("{}")):
                    out.append((key, m.group(1)))
        return out


@dataclass(frozen=True)
class HloComputation:
    name: str
    is_entry: bool
    instructions: tuple[HloInstruction, ...]

    def by_name(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self.instructions}


@dataclass(frozen=True)
class StackFrame:
    file: str
    function: str
    line: int
    parent: int | None


@dataclass(frozen=True)
class HloModule:
    name: str
    header_attrs: dict[str, str]
    computations: dict[str, HloComputation]
    entry: str
    frames: dict[int, StackFrame] = field(default_factory=dict)
    by_name: dict[str, HloInstruction] = field(default_factory=dict, repr=False)
    attributions: dict = field(default_factory=dict, repr=False, compare=False)
    derived: dict = field(default_factory=dict, repr=False, compare=False)  # indexes the passes share

    def users(self) -> dict[str, list[HloInstruction]]:
        """Each instruction's users, across computations (built once per module)."""
        hit = self.derived.get("users")
        if hit is None:
            hit = self.derived["users"] = {}
            for comp in self.computations.values():
                for ins in comp.instructions:
                    for op in ins.operands:
                        hit.setdefault(op, []).append(ins)
        return hit

    @property
    def entry_computation(self) -> HloComputation:
        return self.computations[self.entry]

    @property
    def num_partitions(self) -> int:
        return int(self.header_attrs.get("num_partitions", "1"))

    def instruction(self, name: str) -> HloInstruction | None:
        return self.by_name.get(name)

    def stack_of(self, ins: HloInstruction) -> list[SourceLocation]:
        """The op's call stack, innermost frame first: the StackFrames chain of its
        ``stack_frame_id``, else the metadata's source_file/source_line."""
        frame_id = ins.metadata.get("stack_frame_id")
        stack: list[SourceLocation] = []
        seen: set[int] = set()
        while isinstance(frame_id, int) and frame_id in self.frames and frame_id not in seen:
            seen.add(frame_id)
            f = self.frames[frame_id]
            stack.append(SourceLocation.model_construct(file=f.file, line=f.line, function=f.function or None))
            frame_id = f.parent
        if stack:
            return stack
        file, line = ins.metadata.get("source_file"), ins.metadata.get("source_line")
        if isinstance(file, str) and isinstance(line, int):
            return [SourceLocation.model_construct(file=file, line=line, function=None)]
        return []

    def attribution_of(
        self, ins: HloInstruction, ownership: CodeOwnership = DEFAULT_OWNERSHIP,
    ) -> tuple[SourceLocation | None, SourceLocation | None]:
        """(the user's line, the library line it went through) for an instruction."""
        key = (ownership, ins.metadata.get("stack_frame_id"), ins.metadata.get("source_file"),
               ins.metadata.get("source_line"))
        hit = self.attributions.get(key)
        if hit is None:
            hit = self.attributions[key] = ownership.attribute(self.stack_of(ins))
        return hit

    def source_of(self, ins: HloInstruction, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> SourceLocation | None:
        return self.attribution_of(ins, ownership)[0]


# Brackets, commas and whole double-quoted strings: everything else is skipped in C.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{},]')
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    parts, start, depth = [], 0, 0
    for m in _STRUCTURE.finditer(text):
        ch = m.group()
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:m.start()])
            start = m.end()
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _balanced_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at text[start]."""
    depth = 0
    for m in _STRUCTURE.finditer(text, start):
        ch = m.group()
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.end()
    raise HloParseError(f"unbalanced brackets in: {text[:120]}")


def _parse_attrs(text: str) -> tuple[dict[str, str], dict[str, str | int]]:
    attrs: dict[str, str] = {}
    metadata: dict[str, str | int] = {}
    for part in _split_top_level(text.lstrip(", ")):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        key = key.strip()
        if key == "metadata":
            metadata = _parse_metadata(value)
        else:
            attrs[key] = value.strip()
    return attrs, metadata


def _parse_metadata(text: str) -> dict[str, str | int]:
    inner = text.strip()[1:-1]
    out: dict[str, str | int] = {}
    for m in _METADATA_STR.finditer(inner):
        value = m.group(2)
        out[m.group(1)] = _UNESCAPE.sub(r"\1", value) if "\\" in value else value
    stripped = _METADATA_STR.sub("", inner)
    for m in _METADATA_INT.finditer(stripped):
        out[m.group(1)] = int(m.group(2))
    return out


# name = shape opcode( for an array-shaped instruction, the common case, in one match.
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
            shape_end = _balanced_end(rest, 0)
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
    ops_end = close + 1 if "(" not in inner and '"' not in inner else _balanced_end(rest, paren)
    operand_text = rest[paren + 1 : ops_end - 1]
    if "%" in operand_text:  # printed operands are %names (with their shapes in dumps)
        operands = tuple(_OPERAND.findall(operand_text))
    else:  # parameter(0), constant(1.5), get-tuple-element index forms
        operands = tuple(tok.split()[-1] for tok in _split_top_level(operand_text) if tok.split())
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
    for part in _split_top_level(attr_text):
        k, _, v = part.partition("=")
        header_attrs[k.strip()] = v.strip()

    computations: dict[str, HloComputation] = {}
    entry = None
    table_lines: list[str] = []
    current_name, current_entry, current_instrs = None, False, []
    parse = _parse_stripped
    append = None
    for line in lines[1:]:
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        if append is not None and s[0] != "}":  # inside a computation: an instruction (the common case)
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
        if s == "}":
            computations[current_name] = HloComputation(current_name, current_entry, tuple(current_instrs))
            if current_entry:
                entry = current_name
            current_name, append = None, None
            continue
        current_instrs.append(parse(s))
    if current_name is not None:
        raise HloParseError(f"computation {current_name} is not closed")
    if entry is None:
        raise HloParseError("the HLO module has no ENTRY computation")
    by_name = {i.name: i for c in computations.values() for i in c.instructions}
    module = HloModule(mod_name.strip(), header_attrs, computations, entry, _parse_tables(table_lines), by_name)
    _check_numbers(module)
    return module


def _check_numbers(module: HloModule) -> None:
    """The fields later passes read as numbers are numbers, and every replica
    group is readable and of a sane size: a malformed module fails here, once,
    with the instruction named, not deep inside an analysis."""
    from .collectives import replica_groups_text
    from .device_groups import MAX_GROUP_DEVICES, DeviceGroupError, MalformedDeviceGroups, parse_replica_groups

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
                    parse_replica_groups(replica_groups_text(ins), num_devices)
                except MalformedDeviceGroups as e:
                    raise HloParseError(f"%{ins.name}: {e}") from None
                except DeviceGroupError:  # a form this parser does not read: the collectives pass says so
                    pass
