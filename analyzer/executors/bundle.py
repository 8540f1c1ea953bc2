"""What a remote worker needs to compile a candidate as this machine would: the
script's folder (its helper modules and the files it reads), the config file, and a
GPU target spec, placed on the worker under a root of its own at their absolute
paths here (``ROOT/home/me/proj/train.py``), with the child run in ``ROOT`` + this
working directory.

That mirroring is what keeps a worker's report byte for byte the local one: paths
beneath the working directory are shown relative to it (the same text), the rest
absolute (``ROOT`` + the same text, and the worker removes ``ROOT`` from what it
sends back); the nearest ``pyproject.toml`` above the script is found the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from ..errors import ShardLintInputError

MAX_BUNDLE_BYTES = 64 << 20
MAX_BUNDLE_FILES = 10_000
STALE_BUNDLE_S = 24 * 3600
_SKIPPED_FOLDERS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


@dataclass(frozen=True)
class Bundle:
    # Absolute path here -> content.
    files: tuple[tuple[str, bytes], ...]
    cwd: str
    digest: str


def script_folder(script: str, cwd: str) -> str | None:
    """The folder a script's own imports come from: ``train.py``'s folder, or for
    ``package.module:fn`` the top-level package in the working directory."""
    path = script.split(":")[0]
    if path.endswith(".py") or os.path.isfile(path):
        return os.path.dirname(os.path.abspath(path))
    top = path.split(".")[0]
    for candidate in (os.path.join(cwd, top), os.path.join(cwd, top + ".py")):
        if os.path.exists(candidate):
            return candidate
    return None


def make_bundle(script: str, extra_files: list[str]) -> Bundle:
    """A script's folder (or top-level package) and ``extra_files`` (the config, a GPU target spec)."""
    folder = script_folder(script, os.getcwd())
    return _bundle([folder] if folder else [], extra_files, f"the script's folder {folder}")


def make_path_bundle(paths: list[str], extra_files: list[str]) -> Bundle:
    """Checked-in programs (files, or XLA dump folders) and ``extra_files``."""
    return _bundle([os.path.abspath(p) for p in paths], extra_files, "the checked-in programs")


def _bundle(roots: list[str], extra_files: list[str], what: str) -> Bundle:
    cwd = os.getcwd()
    files: dict[str, bytes] = {}
    total = 0
    paths = [f for root in roots for f in (_walk(root) if os.path.isdir(root) else [root])]
    for path in paths + [os.path.abspath(p) for p in extra_files if p and os.path.isfile(p)]:
        if path in files:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_BUNDLE_BYTES + 1)
        except OSError:
            continue  # unreadable here: the worker will miss it as this machine would
        total += len(data)
        if total > MAX_BUNDLE_BYTES or len(files) >= MAX_BUNDLE_FILES:
            raise ShardLintInputError("--executor", f"{what} hold more than {MAX_BUNDLE_BYTES >> 20} MiB or "
                                      f"{MAX_BUNDLE_FILES:,} files to send to the workers; move the script into a "
                                      "folder of its own (with what it imports), or check fewer files at once")
        files[path] = data
    digest = hashlib.sha256(cwd.encode())
    for path, data in sorted(files.items()):
        digest.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    return Bundle(tuple(sorted(files.items())), cwd, digest.hexdigest()[:24])


def _walk(folder: str):
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_FOLDERS
                         and not os.path.exists(os.path.join(root, d, "pyvenv.cfg")))
        for name in sorted(names):
            path = os.path.join(root, name)
            if not name.startswith(".") and not name.endswith((".pyc", ".pyo")) and os.path.isfile(path):
                yield os.path.abspath(path)


def materialize(bundle: Bundle) -> str:
    """The bundle's files under a root on this (worker) machine, written once per bundle
    and shared by the candidates that run here."""
    base = os.path.join(tempfile.gettempdir(), "jax-shard-lint-bundles")
    root = os.path.join(base, bundle.digest)
    if os.path.isdir(root):
        os.utime(root)
        return root
    os.makedirs(base, exist_ok=True)
    _remove_stale(base)
    staging = tempfile.mkdtemp(prefix=f".{bundle.digest}-", dir=base)
    for path, data in bundle.files:
        target = staging + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)
    os.makedirs(staging + bundle.cwd, exist_ok=True)
    try:
        os.rename(staging, root)
    except OSError:  # another candidate on this machine wrote it first
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return root


def _remove_stale(base: str) -> None:
    """Bundles no candidate has used for a day: a worker runs many sweeps."""
    now = time.time()
    for entry in os.scandir(base):
        with contextlib.suppress(OSError):
            if entry.is_dir() and now - entry.stat().st_mtime > STALE_BUNDLE_S:
                shutil.rmtree(entry.path, ignore_errors=True)


def rerooted(argv: tuple[str, ...], bundle: Bundle, root: str) -> tuple[str, ...]:
    """The command line with each path this machine named (script, --config, --target-config) under ``root``."""
    shipped = {path for path, _ in bundle.files}
    # A shipped folder (an XLA dump directory check was given) is named by its path too.
    folders = {os.path.dirname(path) for path in shipped}
    out = []
    for arg in argv:
        path, sep, rest = arg.partition(":")
        absolute = os.path.abspath(os.path.join(bundle.cwd, path)) if path else path
        if os.path.isabs(path) and (absolute in shipped or absolute in folders):
            out.append(root + absolute + sep + rest)
        else:
            out.append(arg)
    return tuple(out)
