"""Reading the files a user hands us (baselines, StableHLO, compiled HLO and its
reports, jax.export artifacts, pyproject.toml): regular files only, of bounded
size, every failure one line naming the file.

A FIFO would block the read forever and a symlink to ``/dev/zero`` would be
read until memory runs out (git can store either), so the file's type is
checked before it is opened and the read never takes more than the limit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat

from ..errors import ShardLintInputError

# A name that can be a file's and read back as the same name: never a path, never hidden.
_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")

MAX_INPUT_BYTES = 1 << 30  # 1 GiB: a 64-layer step's compiled HLO is under 10 MB
MAX_BASELINE_BYTES = 64 << 20


def is_plain_file_name(name: str) -> bool:
    """A target name that can name a file (a snapshot's ``<target>.mlir``, a suggest version's)."""
    return _PLAIN_FILE_NAME.fullmatch(name) is not None


def check_input_file(path: str, limit: int = MAX_INPUT_BYTES) -> None:
    """A regular file of at most ``limit`` bytes, or a one-line error saying what it is."""
    try:
        info = os.stat(path)  # follows symlinks: what would be read
    except FileNotFoundError:
        raise ShardLintInputError(path, "no such file") from None
    except OSError as e:
        raise ShardLintInputError(path, f"cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ShardLintInputError(path, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device" if (
            stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)) else "a socket" if stat.S_ISSOCK(
            info.st_mode) else "not a regular file"
        raise ShardLintInputError(path, f"is {kind}, not a regular file")
    if info.st_size > limit:
        raise ShardLintInputError(path, f"is {info.st_size:,} bytes, more than the {limit:,} this reads")


def read_input_bytes(path: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    check_input_file(path, limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ShardLintInputError(path, f"cannot be read: {e.strerror or e}") from None
    if len(data) > limit:
        raise ShardLintInputError(path, f"is more than the {limit:,} bytes this reads")
    return data


def read_input_text(path: str, limit: int = MAX_INPUT_BYTES, strict: bool = False) -> str:
    """The file as text: undecodable bytes replaced, or (``strict``) a one-line error."""
    data = read_input_bytes(path, limit)
    try:
        return data.decode("utf-8", errors="strict" if strict else "replace")
    except UnicodeDecodeError:
        raise ShardLintInputError(path, "is not UTF-8 text") from None


def read_text_if_present(path: str) -> str | None:
    """A report a compiler may or may not have written (an XLA dump's files): its text, or None."""
    return open(path, encoding="utf-8", errors="replace").read() if os.path.isfile(path) else None


@contextlib.contextmanager
def open_output(path: str, where: str = "-o"):
    """A report or snapshot file opened for writing; a folder that is read-only,
    missing or not a real file system is one line naming the option."""
    try:
        f = open(path, "w", encoding="utf-8")
    except OSError as e:
        raise ShardLintInputError(where, f"cannot write {path}: {e.strerror or e}") from None
    with f:
        yield f


def tool_folders() -> tuple[str, ...]:
    """The tool's own package folders. Its frames (the child that lowers a target) are never the user's
    line, also when it is installed in editable mode inside the project being linted."""
    from ... import analyzer, passes, reports

    return tuple(os.path.abspath(p) for pkg in (analyzer, passes, reports) for p in pkg.__path__)


@functools.lru_cache(maxsize=8)
def installed_folders(entries: tuple[str, ...]) -> tuple[str, ...]:
    """The package folders of the distributions installed into an import path outside site-packages (``pip
    install --target DIR`` put on PYTHONPATH, a vendored folder): each ``*.dist-info``'s RECORD names them, and
    an ``*.egg-info`` pip installed (it lists ``installed-files.txt``) its ``top_level.txt``. A library so
    installed is one still, also in or under the script's folder; an editable install of the user's own project
    keeps its dist-info in site-packages and its source where it is (an in-place ``*.egg-info`` beside it lists
    no installed files), so it is not one of these."""
    found: list[str] = []
    for entry in entries:
        folder = os.path.abspath(entry or ".")
        if set(re.split(r"[\\/]", folder)) & {"site-packages", "dist-packages"} or not os.path.isdir(folder):
            continue
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(folder)):
                info = os.path.join(folder, name)
                tops = (_record_tops(os.path.join(info, "RECORD")) if name.endswith(".dist-info") else
                        _lines(os.path.join(info, "top_level.txt"))
                        if name.endswith(".egg-info") and os.path.isfile(os.path.join(info, "installed-files.txt"))
                        else [])
                found += [os.path.join(folder, top) for top in tops if os.path.isdir(os.path.join(folder, top))]
    return tuple(dict.fromkeys(found))


# How many folders folders_beside lists at most: a script at the top of a large tree is not walked whole.
_MOST_BESIDE = 2000


@functools.lru_cache(maxsize=8)
def folders_beside(roots: tuple[str, ...], depth: int = 2) -> tuple[str, ...]:
    """``roots`` and the folders under them ``depth`` levels down (hidden ones and site-packages aside): where a
    library installed beside the script lies when the script, not PYTHONPATH, puts it on the import path
    (``sys.path.insert(0, "site")`` after ``pip install --target site jraph``), for ``installed_folders``."""
    found: list[str] = []
    level = [os.path.abspath(r) for r in roots if os.path.isdir(r)]
    for _ in range(depth + 1):
        level = level[:max(0, _MOST_BESIDE - len(found))]
        found += level
        below = []
        for folder in level:
            with contextlib.suppress(OSError):
                below += [e.path for e in sorted(os.scandir(folder), key=lambda e: e.name) if e.is_dir()
                          and not e.name.startswith((".", "__")) and e.name not in ("site-packages", "dist-packages")
                          and not e.name.endswith((".dist-info", ".egg-info"))]
        level = below
    return tuple(dict.fromkeys(found))


def _lines(path: str) -> list[str]:
    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]
    return []


def _record_tops(record: str) -> list[str]:
    """The top-level folders a dist-info's RECORD lists (its own metadata folder and scripts aside)."""
    with contextlib.suppress(OSError), open(record, encoding="utf-8", errors="replace") as f:
        tops = {line.split(",", 1)[0].replace("\\", "/").split("/", 1)[0] for line in f if "/" in line.split(",", 1)[0]}
        return sorted(t for t in tops if t and not t.endswith((".dist-info", ".data")) and t != "..")
    return []
