"""Programs checked in as files, read and validated without running any Python from them:
StableHLO (``.mlir``), ``jax.export`` artifacts, compiled HLO text as XLA dumps
it (``*after_optimizations*.txt``, with the buffer-assignment report beside it
when present), and whole XLA dump directories."""

from __future__ import annotations

import glob
import os
import re

from ...passes.pipelines.stablehlo_edits import missing_entry
from ..adapter import jax_adapter
from ..errors import ShardLintInputError, one_line
from ..supervision import isolation
from .files import read_input_bytes, read_input_text
from .limits import check_mlir_text

HLO_SUFFIX = re.compile(r"after_optimizations\.txt$")


def read_mlir(path: str):
    """Parse a StableHLO file; bad input is one line naming the file."""
    text = read_input_text(path)
    if not text.strip():
        raise ShardLintInputError(path, "not a StableHLO module: the file is empty")
    check_mlir_text(path, text)
    isolation.phase(path, "parsing the module")
    try:
        module = jax_adapter.parse_stablehlo(text)
    except Exception as e:
        lines = str(e).strip().splitlines()
        detail = next((ln.strip() for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
        # MLIR names the text it parsed "-": say the line and column of the file instead.
        detail = re.sub(r'^error: "-":(\d+):(\d+): ', r"line \1, column \2: ", detail)
        raise ShardLintInputError(path, f"not a StableHLO module: {detail}") from None
    problem = missing_entry(module)
    if problem:
        raise ShardLintInputError(path, f"not a StableHLO program: {problem}")
    return module, text


def dump_module_name(path: str) -> str:
    base = os.path.basename(path)
    m = re.match(r"module_\d+\.(.+?)\.(?:[\w.]*_)?after_optimizations\.txt$", base)
    return m.group(1) if m else os.path.splitext(base)[0]


def numbered_module_name(path: str) -> str:
    """``module_0038.jit_f``: the dump's module number with the function's name."""
    m = re.match(r"(module_\d+)\.", os.path.basename(path))
    return f"{m.group(1)}.{dump_module_name(path)}" if m else dump_module_name(path)


def dump_directory_modules(path: str) -> list[str]:
    # Regular files only: a folder or a dangling link named like a module is not one.
    files = sorted(f for f in glob.glob(os.path.join(path, "*after_optimizations.txt")) if os.path.isfile(f))
    if not files:
        raise ShardLintInputError(path, "no *after_optimizations.txt in this XLA dump directory")
    return files


def read_export(path: str) -> tuple[str, int]:
    """StableHLO text and device count of a ``jax.export`` serialized artifact."""
    data = read_input_bytes(path)
    try:
        exported = jax_adapter.deserialize_export(data)
    except Exception as e:
        raise ShardLintInputError(path, f"not a jax.export artifact: {one_line(e)}") from None
    try:  # the module's bytecode is deserialised only here: a damaged one fails now
        text = exported.mlir_module()
    except Exception as e:
        raise ShardLintInputError(path, f"a damaged jax.export artifact: its StableHLO does not load "
                                  f"({one_line(e)})") from None
    check_mlir_text(path, text)
    return text, exported.nr_devices


def kind_of(path: str) -> str:
    if os.path.isdir(path):
        return "dump"
    if path.endswith(".mlir"):
        return "mlir"
    if HLO_SUFFIX.search(path) or path.endswith(".hlo"):
        return "hlo"
    return "export"


def _snapshot_meta(mlir_path: str) -> dict:
    """The metadata beside a snapshot's module ({} where there is none or it does not read)."""
    meta = os.path.splitext(mlir_path)[0] + ".meta.json"
    if not os.path.isfile(meta):
        return {}
    import json

    try:
        with open(meta, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def snapshot_platform(mlir_path: str) -> str | None:
    """The platform a snapshot was taken on, from the metadata beside it."""
    return str(_snapshot_meta(mlir_path).get("platform", "")) or None


def snapshot_order(mlir_path: str) -> int | None:
    """The target's place in its script's order, from the metadata beside a snapshot (None: not recorded)."""
    order = _snapshot_meta(mlir_path).get("order")
    return order if isinstance(order, int) and not isinstance(order, bool) else None


def snapshot_donated_inputs(mlir_path: str) -> frozenset[int] | None:
    """The flattened arguments the user donated, from the metadata beside a snapshot: jit leaves a
    donation no output matches out of the module, so the module alone does not say it. None: not recorded."""
    donated = _snapshot_meta(mlir_path).get("donated_inputs")
    if not isinstance(donated, list) or not all(isinstance(i, int) for i in donated):
        return None
    return frozenset(donated)




def snapshot_code_owners(mlir_path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Whose code the snapshot's locations are, as the snapshot's run decided it: the script's folders (the
    user's) and the folders of the libraries pip installed beside it or on its import path (never the user's),
    from the metadata beside it ((), () where not recorded: a snapshot written before they were)."""
    meta = _snapshot_meta(mlir_path)

    def folders(key: str) -> tuple[str, ...]:
        found = meta.get(key)
        return tuple(found) if isinstance(found, list) and all(isinstance(f, str) for f in found) else ()

    return folders("user_roots"), folders("library_folders")
