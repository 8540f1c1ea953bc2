"""tests/ci_deps.py: a missing dependency skips, except under CI, where it fails."""

import pytest
from ci_deps import has_module, missing, needs

pytestmark = pytest.mark.jax_free


def test_a_missing_dependency_skips_outside_ci_and_fails_under_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no such thing"):
        missing("no such thing")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI installs this, yet: no such thing"):
        missing("no such thing")


def test_a_dotted_module_whose_package_is_missing_is_missing_not_an_error(monkeypatch):
    assert not has_module("no_such_package_here.plugin")
    assert has_module("json")
    monkeypatch.delenv("CI", raising=False)
    assert needs("no_such_package_here.plugin", "r").args == (True,)
    monkeypatch.setenv("CI", "true")
    assert needs("no_such_package_here.plugin", "r").args == (False,)  # runs, and fails on the import
