"""The files of a script's program, for the source rules: the script and every first-party module it
reaches through its imports (modules beside it or below its folder, and the packages and folders the
configuration names first-party), found by reading import statements: nothing is imported for this.
And the suppression comments of a run's files, read here and applied by the run-wide pipeline (what a
suppression is and silences: passes/rules/suppressions.py, its one owner)."""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass

from ...passes.models.report import Finding, TargetReport
from ...passes.pipelines.run_wide import file_suppressions, parsed_source, program_rule_findings, suppressed
from .config import Settings
from .display_paths import display_path, same_file


@dataclass(frozen=True)
class ProgramFiles:
    files: tuple[str, ...]  # the script first, then the modules it reaches, sorted
    roots: tuple[str, ...]  # the folders module names start from
    texts: dict[str, str]


def _first_party_roots(settings: Settings | None) -> tuple[list[str], list[str]]:
    """The configured first-party code as (folders module names start from, what of them is the program).
    A first-party folder (``src/``, from the configuration's folder) is both. A first-party package
    (``mypkg``, found without importing it) is named from the folder holding it, but only the package is
    the program: that folder is often site-packages, and reading all of it (every library the package
    imports, transitively) made a ``first-party = ["transformers"]`` lint read thousands of files."""
    if settings is None:
        return [], []
    base = os.path.dirname(settings.config_file) if settings.config_file else os.getcwd()
    bases, members = [], []
    for entry in settings.first_party:
        if entry.endswith("/") or os.sep in entry:
            folder = os.path.abspath(os.path.join(base, entry))
            bases.append(folder)
            members.append(folder)
            continue
        try:
            spec = importlib.util.find_spec(entry.split(".")[0])
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            parent = os.path.dirname(os.path.abspath(location))
            bases.append(parent)
            members.append(os.path.join(parent, *entry.split(".")))
    return bases, members


def _is_member(path: str, members: tuple[str, ...]) -> bool:
    """A file of the program: inside a member folder, or a member module (``mypkg.mod`` is mypkg/mod.py)."""
    return any(path.startswith(m + os.sep) or path == m + ".py" for m in members)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run: not those under ``if TYPE_CHECKING:``, which name types only (a
    lazily loaded package lists all its modules there: transformers' ``__init__`` reaches its 1983 files)."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(reversed(node.orelse))
        else:
            todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def _candidates(name: str, base: str) -> list[str]:
    rel = os.path.join(base, *name.split("."))
    return [c for c in (rel + ".py", os.path.join(rel, "__init__.py")) if os.path.isfile(c)]


def program_files(script: str, settings: Settings | None = None) -> ProgramFiles:
    script = os.path.abspath(script)
    first_party_bases, member_folders = _first_party_roots(settings)
    roots = tuple(dict.fromkeys([os.path.dirname(script)] + first_party_bases))
    members = tuple(dict.fromkeys([os.path.dirname(script)] + member_folders))
    texts: dict[str, str] = {}
    todo = [script]
    while todo:
        path = todo.pop()
        if path in texts or (path != script and not _is_member(path, members)):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                texts[path] = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        tree = parsed_source(path, texts[path]).tree
        if tree is None:
            continue
        here = os.path.dirname(path)
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                names, bases = [a.name for a in node.names], roots
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                names = [module] + [f"{module}.{a.name}" if module else a.name for a in node.names]
                if node.level:
                    up = here
                    for _ in range(node.level - 1):
                        up = os.path.dirname(up)
                    bases = (up,)
                else:
                    bases = roots
            else:
                continue
            for name in names:
                parts = name.split(".")
                for base in bases:
                    # import a.b.c reaches a/__init__.py and a/b/__init__.py too
                    for k in range(1, len(parts) + 1):
                        todo.extend(os.path.abspath(c) for c in _candidates(".".join(parts[:k]), base))
    files = sorted(p for p in texts if p != script)
    return ProgramFiles((script, *files), roots, {p: texts[p] for p in (script, *files) if p in texts})


def program_findings(program: ProgramFiles, settings: Settings) -> tuple[list[Finding], list[str]]:
    """The source rules' findings over the whole program, and the files read with a newer grammar or
    not analysed (named, never skipped in silence)."""
    result = program_analysis(program, settings)
    return list(result.findings), shown_notes(result.notes, program)


def shown_notes(notes: tuple[str, ...], program: ProgramFiles) -> list[str]:
    """The notes with their files as reports show paths (relative to the working folder beneath it)."""
    out = []
    for note in notes:
        path = next((p for p in program.texts if note.startswith(p + ": ")), None)
        out.append(display_path(path, os.getcwd()) + note[len(path):] if path else note)
    return out


def program_analysis(program: ProgramFiles, settings: Settings):  # the source rules stage's ProgramFindings
    return program_rule_findings(program.texts, program.roots, settings.ignore, settings.severities)


def apply_run_suppressions(
    reports: list[TargetReport], files: list[str], settings: Settings, report_unused: bool,
    extra: list[Finding] | None = None,
) -> tuple[list[TargetReport], list[Finding]]:
    """Suppress target findings and run-wide ones (``extra``: the source rules'),
    and report suppressions that silence nothing (the run-wide pipeline's stages)."""
    return suppressed(reports, list(extra or []), file_suppressions(files, read_text), same_file, settings.ignore,
                      settings.severities, report_unused)


def read_text(path: str) -> str | None:
    """A file's text for its suppression comments (None: it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None
