"""XLA's memory figures of a compiled program, per device (``compiled.memory_analysis()``, or a dump's
buffer-assignment report): what the analyzer reads and the memory passes summarize."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryStats:
    """The numbers of ``compiled.memory_analysis()``, per device."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    generated_code_bytes: int = 0

    @property
    def peak_bytes(self) -> int:
        return self.temp_bytes + self.argument_bytes + self.output_bytes - self.alias_bytes
