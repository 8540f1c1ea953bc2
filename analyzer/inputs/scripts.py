"""Import a user's script as a module and collect its lint targets.

A script defines ``shard_lint_targets(**params)`` returning a dict of name to
``jax.stages.Lowered``, or a list of them (named after their functions).
``SCRIPT:function`` or ``package.module:function`` names another entry point.
The script's ``if __name__ == "__main__"`` block does not run.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import ShardLintInputError, one_line
from ..supervision import isolation

DEFAULT_ENTRY = "shard_lint_targets"
# Parameters the tool fills in itself: the devices it compiles for.
TOOL_PARAMS = ("mesh_devices",)


def split_spec(spec: str) -> tuple[str, str]:
    """``path.py:fn`` -> (path.py, fn); a Windows drive colon is not a separator."""
    m = re.match(r"^(.*?)(?::([A-Za-z_]\w*))?$", spec)
    target, fn = (m.group(1), m.group(2)) if m else (spec, None)
    return target, fn or DEFAULT_ENTRY


def _raised_at(exc: BaseException, path: str, entry: str = "<module>") -> str:
    """Where the user's code raised: the innermost frame of the traceback that is the
    user's (not a library's, not the standard library's, not this tool's). In the
    script itself, at module level or in the entry function: ``(line N)``; in a
    function it calls: ``(line N, in helper)``; in another of the user's files:
    ``(at file.py:N, in helper)``. Where a library raised below it (a package pip installed
    beside the script counts as one), its frame follows: ``; raised in ott/math/fixed_point_loop.py:80, in f``."""
    from ...passes.pipelines.inputs import DEFAULT_OWNERSHIP, CodeOwnership
    from .files import folders_beside, installed_folders, tool_folders

    folder = os.path.dirname(path)
    installed = installed_folders(tuple(sys.path) + folders_beside((folder,)))
    ownership = CodeOwnership(third_party=tool_folders() + installed, user_roots=(folder,),
                              stdlib=DEFAULT_OWNERSHIP.stdlib)
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [k for k, f in enumerate(frames) if ownership.is_user(os.path.abspath(f.filename))]
    if not mine:
        return ""
    frame = frames[mine[-1]]
    below = [f for f in frames[mine[-1] + 1:] if not _in_folders(f.filename, ownership.stdlib + tool_folders())]
    raised = f"; raised in {_shown(below[-1].filename)}:{below[-1].lineno}, in {below[-1].name}" if below else ""
    if os.path.abspath(frame.filename) != path:
        return f" (at {_shown(frame.filename)}:{frame.lineno}, in {frame.name}{raised})"
    if frame.name in ("<module>", entry):
        return f" (line {frame.lineno}{raised})"
    return f" (line {frame.lineno}, in {frame.name}{raised})"


def _shown(filename: str) -> str:
    """A file as an error line names it: relative to the working folder where it lies under it."""
    return os.path.relpath(filename) if os.path.abspath(filename).startswith(os.getcwd() + os.sep) else filename


def _in_folders(filename: str, folders: tuple[str, ...]) -> bool:
    path = os.path.abspath(filename)
    return any(f and path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def import_script(path: str) -> Any:
    """Import a script file as a module named after it, with its folder on sys.path."""
    abspath = os.path.abspath(path)
    if not os.path.exists(abspath):
        raise ShardLintInputError(path, "no such file")
    if os.path.isdir(abspath):
        raise ShardLintInputError(path, "is a directory, not a Python script")
    name = "_shard_lint_script_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(abspath))[0])
    spec = importlib.util.spec_from_file_location(name, abspath)
    if spec is None or spec.loader is None:
        raise ShardLintInputError(path, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    isolation.phase(path, "importing the script")
    folder = os.path.dirname(abspath)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        # What the script prints goes to stderr: stdout carries the report (--format json).
        with contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ShardLintInputError(path, f"syntax error at line {e.lineno}: {e.msg}") from e
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ShardLintInputError(path, f"the script raised {one_line(e)}{_raised_at(e, abspath)}") from e
    return module


def load_entry(spec: str) -> tuple[Callable[..., Any], str]:
    """The entry function and the file to name in messages."""
    target, fn_name = split_spec(spec)
    if target.endswith(".py") or os.sep in target or os.path.exists(target):
        module = import_script(target)
        where = target
    else:
        # As `python -m` would: the working directory holds the package. It is on
        # sys.path only from here (the child starts with -P, see supervisor.py).
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            with contextlib.redirect_stdout(sys.stderr):
                module = importlib.import_module(target)
        except ImportError as e:
            raise ShardLintInputError(target, f"cannot import module: {one_line(e)}") from e
        except BaseException as e:
            raise ShardLintInputError(target, f"the module raised {one_line(e)}") from e
        where = getattr(module, "__file__", None) or target
    fn = getattr(module, fn_name, None)
    if fn is None:
        run_hint = (f"; a script that trains as it is, without one, is analysed with jax-shard-lint run {where}"
                    if fn_name == DEFAULT_ENTRY else "")
        raise ShardLintInputError(where, f"defines no function {fn_name}() (see README: 'What a script gives us')"
                                  f"{run_hint}")
    if not callable(fn):
        raise ShardLintInputError(where, f"{fn_name} is not a function")
    return fn, where


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``--set K=V`` values: Python literals where they parse, strings otherwise."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ShardLintInputError("--set", f"expected NAME=VALUE, got {pair!r}")
        try:
            params[key] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            params[key] = value.strip()
    return params


def _is_lowered(obj: Any) -> bool:
    import jax

    return isinstance(obj, jax.stages.Lowered)


def _lowered_name(lowered: Any) -> str:
    m = re.search(r"module @(?:jit_)?([\w.]+)", lowered.as_text()[:400])
    return m.group(1) if m else "target"


def call_targets(fn: Callable[..., Any], where: str, params: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the entry with the params and check what it returned."""
    sig = inspect.signature(fn)
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    known = [n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    settable = [n for n in known if n not in TOOL_PARAMS]
    for key in params:
        if key in TOOL_PARAMS:
            raise ShardLintInputError("--set", f"{key} is passed by jax-shard-lint itself, not set on the command line")
        if not accepts_any and key not in known:
            takes = ", ".join(settable) if settable else "no parameters"
            raise ShardLintInputError(where, f"unknown param {key!r} ({fn.__name__} takes: {takes})")
    for key, value in params.items():
        default = sig.parameters[key].default if key in sig.parameters else inspect.Parameter.empty
        if isinstance(value, str) and isinstance(default, (bool, int, float)):
            # --set batch=8x reads as the string '8x': say so here, not as the step's TypeError later.
            kind = "True or False" if isinstance(default, bool) else "a number"
            raise ShardLintInputError("--set", f"{key}={value}: expected {kind} ({fn.__name__}'s default for {key} "
                                      f"is {default!r})")
    kwargs = dict(params)
    for key, value in (extra or {}).items():
        if accepts_any or key in known:
            kwargs.setdefault(key, value)
    from ..adapter import jax_adapter

    # After the import (libraries register their exclusions then), before lowering.
    jax_adapter.record_library_frames()
    isolation.phase(where, f"running {fn.__name__}()")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = fn(**kwargs)
    except TypeError as e:
        raise ShardLintInputError(
            where, f"{fn.__name__}() failed: {one_line(e)}{_raised_at(e, os.path.abspath(where), fn.__name__)}"
        ) from e
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        from .host_callbacks import host_callback_problem
        from .indivisible import indivisible_problem

        problem = indivisible_problem(e, os.path.abspath(where), params) or host_callback_problem(e)
        if problem is not None:
            raise ShardLintInputError(where, problem + _raised_at(e, os.path.abspath(where), fn.__name__)) from e
        raise ShardLintInputError(
            where, f"{fn.__name__}() raised {one_line(e)}{_raised_at(e, os.path.abspath(where), fn.__name__)}"
        ) from e
    if isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (list, tuple)):
        items, seen = [], {}
        for lowered in result:
            base = _lowered_name(lowered) if _is_lowered(lowered) else "target"
            seen[base] = seen.get(base, 0) + 1
            items.append((base if seen[base] == 1 else f"{base}_{seen[base]}", lowered))
    elif _is_lowered(result):
        items = [(_lowered_name(result), result)]
    else:
        raise ShardLintInputError(
            where, f"{fn.__name__}() returned {type(result).__name__}; expected a dict of name to "
            "jax.jit(f).lower(...) results"
        )
    if not items:
        raise ShardLintInputError(where, f"{fn.__name__}() returned no targets")
    targets: dict[str, Any] = {}
    for name, lowered in items:
        if not _is_lowered(lowered):
            hint = " (call .lower(*args) on the jitted function)" if callable(lowered) else ""
            raise ShardLintInputError(
                where, f"target {name!r} is a {type(lowered).__name__}, not a jax.stages.Lowered{hint}"
            )
        targets[str(name)] = lowered
    return targets


def select_targets(targets: dict[str, Any], wanted: list[str], where: str) -> dict[str, Any]:
    if not wanted:
        return targets
    missing = [w for w in wanted if w not in targets]
    if missing:
        raise ShardLintInputError(
            where, f"unknown target {missing[0]!r} (targets: {', '.join(targets)})"
        )
    return {w: targets[w] for w in wanted}
