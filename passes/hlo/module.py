"""The parsed compiled HLO module: its computations, instructions and the
stack-frame tables that ``stack_frame_id`` indexes (parser.py builds it from
``compiled.as_text()`` or XLA's ``*after_optimizations.txt`` dump).

Only what the passes need is kept: names, shapes, opcodes, operands, the
attributes that name called computations, metadata and backend_config.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..models.errors import HloParseError
from ..models.report import SourceLocation
from ..source.frames import DEFAULT_OWNERSHIP, CodeOwnership
from .attributes import parse_attributes

_COMPUTATION_REF = re.compile(r"%?([\w.\-]+)")
# A called computation without parsing the whole attribute list (metadata included).
_CALL_TARGET = re.compile(r"\{[^}]*\}|%?[\w.\-]+")

# Attributes whose values name other computations.
_CALL_ATTRS = (
    "calls", "to_apply", "body", "condition", "branch_computations",
    "true_computation", "false_computation", "called_computations",
)
_CALL_KEYS = tuple(key + "=" for key in _CALL_ATTRS)
_MAY_CALL = re.compile(r"\b(?:" + "|".join(_CALL_ATTRS) + r")=")


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
        self._attrs, self._metadata = parse_attributes(self.attr_text)

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

    def backend_config(self) -> dict[str, Any]:
        raw = self.attrs.get("backend_config")
        if not raw:
            return {}
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError:
            return {}
        return cfg if isinstance(cfg, dict) else {}

    def replica_groups_text(self) -> str | None:
        """The replica groups as one text. In the mesh form with a device order
        (TPU: ``mesh[...], device_ids=([2,2,2]T(2,1,0)) {'axis_0':(2)2}``) the order and
        the axis selection print as a second attribute, which belongs to the first."""
        groups = self.attrs.get("replica_groups")
        order = self.attrs.get("device_ids")
        if groups and groups.strip().startswith("mesh[") and order and "{" not in groups:
            return f"{groups}, device_ids={order}"
        return groups

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


MAIN_THREAD = "main"


@dataclass(frozen=True)
class HloComputation:
    name: str
    is_entry: bool
    instructions: tuple[HloInstruction, ...]
    # Where XLA runs it: "main", or e.g. "sparsecore" for a TPU's SparseCores (`}, execution_thread=...`).
    execution_thread: str = MAIN_THREAD

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
    # (ownership, frame id, file, line) -> (the user's line, the library line)
    attributions: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False, compare=False)
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # indexes the passes share

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

    def callers(self) -> dict[str, list[HloInstruction]]:
        """Computation name -> the instructions that call it, by any attribute (built once)."""
        hit: dict[str, list[HloInstruction]] | None = self.derived.get("callers")
        if hit is None:
            hit = self.derived["callers"] = {}
            for comp in self.computations.values():
                for ins in comp.instructions:
                    for _, name in ins.called():
                        hit.setdefault(name, []).append(ins)
        return hit

    def computation_of(self, name: str) -> str | None:
        """The computation an instruction is in."""
        hit: dict[str, str] | None = self.derived.get("computation_of")
        if hit is None:
            hit = self.derived["computation_of"] = {
                i.name: c.name for c in self.computations.values() for i in c.instructions}
        return hit.get(name)

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
        hit: tuple[SourceLocation | None, SourceLocation | None] | None = self.attributions.get(key)
        if hit is None:
            hit = self.attributions[key] = ownership.attribute(self.stack_of(ins))
        return hit

    def source_of(self, ins: HloInstruction, ownership: CodeOwnership = DEFAULT_OWNERSHIP) -> SourceLocation | None:
        return self.attribution_of(ins, ownership)[0]
