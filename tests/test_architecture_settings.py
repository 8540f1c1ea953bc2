"""Settings flow one way: what the passes and the solver are told is made with the settings
(``Settings.__post_init__``) and read below as values, so no stage under the front end calls back into
analyzer/context/config.py to derive it (docs/architecture.md, "Where a run's settings go")."""

from __future__ import annotations

import dataclasses
import inspect

from jax_shard_lint.analyzer.context.config import Settings


def test_settings_have_no_method_to_call_back_into():
    methods = sorted(name for name, value in vars(Settings).items()
                     if inspect.isfunction(value) or isinstance(value, (property, staticmethod, classmethod))
                     or hasattr(value, "__set_name__") and not isinstance(value, dataclasses.Field))
    assert [m for m in methods if not m.startswith("__")] == []


def test_a_copy_makes_its_own_pass_config():
    settings = Settings(devices=8, budget_bytes=1 << 30)
    copy = dataclasses.replace(settings, budget_bytes=2 << 30)
    assert settings.pass_config.budget_bytes == 1 << 30 and copy.pass_config.budget_bytes == 2 << 30
    assert copy.pass_config.ownership is settings.pass_config.ownership
    assert copy == dataclasses.replace(settings, budget_bytes=2 << 30)
