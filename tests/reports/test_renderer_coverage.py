"""Every (command, format) the command line offers has a content test, and every field of the models it
renders is shown by each format or listed as deliberately omitted. The pairs are the CLI's commands and the
--format choices each takes (analyzer/cli/main.py's parser, whose choices come from reports/registry.py, or
the command's own, as ``rules``'), and the covered ones are those the tests/reports/test_*_reports.py and
test_rules_table.py files render through report_samples (render_text, render_terminal, render_cli) in a run
of them, not a list they declare. A field is shown by a format when changing its value (in every instance of
its model within one of the rendered samples) changes what the format writes."""

from __future__ import annotations

import argparse
import enum
import glob
import os
import pickle
import subprocess
import sys
import typing
from typing import Any

import pytest
from pydantic import BaseModel
from renderer_omissions import OMITTED
from report_samples import RENDERED_LOG, RENDERED_MODELS

from jax_shard_lint.analyzer.cli.main import build_parser
from jax_shard_lint.reports.registry import RENDERERS


def command_line_pairs() -> set[tuple[str, str]]:
    """(command, format) for every command with a --format option, each of its choices."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {(command, fmt) for command, parser in commands.choices.items() for action in parser._actions
            if "--format" in action.option_strings for fmt in action.choices or ()}


@pytest.fixture(scope="module")
def content_run(tmp_path_factory):
    """The content tests run once: the (command, format) pairs they rendered and the models they rendered."""
    tmp = tmp_path_factory.mktemp("rendered")
    log, models = tmp / "rendered.txt", tmp / "models"
    models.mkdir()
    here = os.path.dirname(__file__)
    content_tests = sorted(glob.glob(os.path.join(here, "test_*_reports.py"))) + [
        os.path.join(here, "test_rules_table.py")]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *content_tests],
        env={**os.environ, RENDERED_LOG: str(log), RENDERED_MODELS: str(models)}, capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rendered = {tuple(line.split()) for line in log.read_text(encoding="utf-8").splitlines()}
    samples: dict[tuple[str, str], list[tuple[BaseModel, dict]]] = {}
    for path in sorted(models.iterdir()):
        command, fmt, model, extra = pickle.loads(path.read_bytes())
        samples.setdefault((command, fmt), []).append((model, extra))
    return rendered, samples


def test_every_format_the_command_line_offers_has_a_content_test(content_run):
    rendered, _ = content_run
    offered = command_line_pairs()
    assert ("lint", "sarif") in offered and ("fit", "json") in offered  # the parser was read
    assert offered - rendered == set(), "formats the command line offers that no content test renders"
    assert rendered - offered == set(), "renders of formats the command line does not offer"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def leaf_fields(cls: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """``Model.field`` for every field of the model and the models it holds that holds no model itself."""
    seen = set() if seen is None else seen
    if cls in seen:
        return set()
    seen.add(cls)
    out = set()
    for name, info in cls.model_fields.items():
        held = _models_in(info.annotation)
        if held:
            for m in held:
                out |= leaf_fields(m, seen)
        else:
            out.add(f"{cls.__name__}.{name}")
    return out


def _changed(value: Any) -> Any:
    """Another value of the same kind (None where there is none to change)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, enum.Enum):
        return next((m for m in type(value) if m != value), None)
    if isinstance(value, int):
        return value * 3 + 7
    if isinstance(value, float):
        return value * 2.5 + 1.75
    if isinstance(value, str):
        return value + "Zq"
    if isinstance(value, list | tuple) and value:
        items = [_changed(v) for v in value]
        return None if all(i is None for i in items) else type(value)(
            i if i is not None else v for i, v in zip(items, value))
    if isinstance(value, dict) and value:
        items = {k: _changed(v) for k, v in value.items()}
        return None if all(i is None for i in items.values()) else {
            k: i if i is not None else value[k] for k, i in items.items()}
    return None


def _with_field_changed(obj: Any, field: str) -> tuple[Any, bool]:
    """The object with ``Model.field`` changed in every instance of that model it holds; whether any was."""
    owner, name = field.split(".")
    if isinstance(obj, BaseModel):
        values, changed = {}, False
        for f in type(obj).model_fields:
            v = getattr(obj, f)
            if type(obj).__name__ == owner and f == name:
                new = _changed(v)
                values[f], hit = (v, False) if new is None else (new, True)
            else:
                values[f], hit = _with_field_changed(v, field)
            changed |= hit
        return (obj.model_construct(_fields_set=obj.model_fields_set, **values) if changed else obj), changed
    if isinstance(obj, list | tuple):
        parts = [_with_field_changed(v, field) for v in obj]
        return (type(obj)(p for p, _ in parts) if any(h for _, h in parts) else obj), any(h for _, h in parts)
    if isinstance(obj, dict):
        parts = {k: _with_field_changed(v, field) for k, v in obj.items()}
        return ({k: p for k, (p, _) in parts.items()} if any(h for _, h in parts.values()) else obj,
                any(h for _, h in parts.values()))
    return obj, False


def _render(command: str, fmt: str, model: BaseModel, extra: dict) -> str:
    from report_samples import render_terminal, render_text

    if fmt == "terminal":
        return render_terminal(command, model, **extra)
    return render_text(command, fmt, model)


def shown_fields(command: str, fmt: str, model: BaseModel, extra: dict, fields: set[str]) -> set[str]:
    """The fields whose change in this sample changes what the format writes (or stops it)."""
    shown = set()
    before = _render(command, fmt, model, extra)
    for field in sorted(fields):
        changed, hit = _with_field_changed(model, field)
        if not hit:
            continue
        try:
            after = _render(command, fmt, changed, extra)
        except Exception:  # the renderer read the value (one it cannot draw): shown
            shown.add(field)
            continue
        if after != before:
            shown.add(field)
    return shown


def test_every_field_is_shown_by_each_format_or_omitted_on_purpose(content_run):
    """Per renderer (lint, run and check share theirs; every command's JSON is one): the fields its samples set
    are shown or listed as omitted on purpose, the ones none sets are listed as unsampled; both lists exact."""
    _, samples = content_run
    by_renderer: dict[str, list[tuple[str, str, BaseModel, dict]]] = {}
    for (command, fmt), rendered in samples.items():
        by_renderer.setdefault(RENDERERS[command][fmt], []).extend((command, fmt, m, e) for m, e in rendered)
    assert set(by_renderer) == {spec for formats in RENDERERS.values() for spec in formats.values()}
    wrong = {}
    for spec, rendered in sorted(by_renderer.items()):
        fields = set().union(*(leaf_fields(type(m)) for _, _, m, _ in rendered))
        populated = {f for f in fields if any(_with_field_changed(m, f)[1] for _, _, m, _ in rendered)}
        shown: set[str] = set()
        for command, fmt, model, extra in rendered:
            shown |= shown_fields(command, fmt, model, extra, populated - shown)
        listed = OMITTED.get(spec, {})
        found = {"omitted": populated - shown, "unsampled": fields - populated}
        for key, have in found.items():
            if have != listed.get(key, frozenset()):
                wrong[(spec, key)] = {"not listed": sorted(have - listed.get(key, frozenset())),
                                      "listed, not so": sorted(listed.get(key, frozenset()) - have)}
    assert wrong == {}


def test_the_field_walk_changes_every_instance():
    class Inner(BaseModel):
        line: int
        name: str | None = None

    class Outer(BaseModel):
        items: list[Inner]
        label: str

    a = Outer(items=[Inner(line=3), Inner(line=4)], label="x")
    changed, hit = _with_field_changed(a, "Inner.line")
    assert hit and [i.line for i in changed.items] == [16, 19] and [i.line for i in a.items] == [3, 4]
    assert _with_field_changed(a, "Inner.name") == (a, False)  # None everywhere: nothing to change
    assert leaf_fields(Outer) == {"Inner.line", "Inner.name", "Outer.label"}
