"""Options and outputs a user can get wrong: one line naming the problem, exit 2,
and nothing a user wrote is overwritten."""

import json
import os
import re
import shutil

import pytest
from conftest import EXAMPLES

REMAT = os.path.join(EXAMPLES, "remat_layer_stack.py")
VALUE = os.path.join(EXAMPLES, "value_function_step.py")


def one_line_error(result, expected):
    assert result.code == 2, result.err[-2000:]
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"jax-shard-lint: error: {expected}", lines


def test_report_never_overwrites_the_script(cli, tmp_path):
    script = tmp_path / "s.py"
    shutil.copy(REMAT, script)
    before = script.read_text()
    one_line_error(cli("lint", str(script), "-o", str(script), "-q"),
                   f"-o: {script} is an input of this run; the report would overwrite it")
    assert script.read_text() == before


def test_report_into_a_missing_folder_or_onto_a_folder(cli, tmp_path):
    one_line_error(cli("lint", REMAT, "-o", str(tmp_path / "no" / "r.json"), "-q"),
                   f"-o: the folder {tmp_path / 'no'} does not exist")
    one_line_error(cli("lint", REMAT, "-o", str(tmp_path), "-q"),
                   f"-o: {tmp_path} is a directory; name a file to write the report to")


@pytest.mark.parametrize("args, expected", [
    (("gate", VALUE, "--baseline", "missing.json", "--max-peak-increase", "nan"),
     "--max-peak-increase: expected a finite percentage like 5%, got 'nan'"),
    (("run", VALUE, "--timeout", "-1"), "--timeout: must be a positive number of seconds (at most a week), got -1.0"),
    (("run", VALUE, "--timeout", "nan"), "--timeout: must be a positive number of seconds (at most a week), got nan"),
    (("fit", REMAT, "--param", "batch", "--budget", "1GiB", "--multiple-of", "0"),
     "--multiple-of: must be at least 1, got 0"),
    (("lint", REMAT, "--budget", "9" * 400), "--budget: unparsable budget: not a size: '" + "9" * 40
     + "' (write e.g. 80GiB, 512MiB, 1.5TB or a byte count)"),
])
def test_nonsense_options(cli, args, expected):
    one_line_error(cli(*args, "-q") if args[0] != "run" else cli(*args), expected)


HOSTILE_NAME = """
import jax, jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

def shard_lint_targets():
    m = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    s = jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=NamedSharding(m, P("x")))
    return {NAME: jax.jit(lambda a: jnp.cumsum(a, axis=0)).lower(s)}
"""


def test_snapshot_refuses_a_target_name_that_is_a_path(cli, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(HOSTILE_NAME.replace("NAME", repr("../escaped")))
    one_line_error(cli("snapshot", str(script), "-o", str(tmp_path / "snap")),
                   f"{script}: target name '../escaped' cannot be a snapshot file name: use letters, digits, "
                   "'_', '.' and '-'")
    assert not (tmp_path / "escaped.mlir").exists()


def test_markdown_keeps_hostile_names_inert(cli, tmp_path):
    script = tmp_path / "s.py"
    name = "<script>alert(1)</script>|[x](javascript:alert(1))\r\n<!--"
    script.write_text(HOSTILE_NAME.replace("NAME", repr(name)))
    result = cli("lint", str(script), "--format", "markdown", "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    out = result.out
    assert "<script>" not in out and "<!--" not in out and "\r" not in out
    assert not re.search(r"(?<!\\)\]\(javascript:", out)  # the only ]( is escaped: no link
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\|\\[x\\](javascript:alert(1))" in out


def test_a_set_value_that_is_not_the_parameters_kind_is_one_line(cli):
    one_line_error(cli("lint", REMAT, "--set", "batch=8x", "-q"),
                   "--set: batch=8x: expected a number (shard_lint_targets's default for batch is 64)")


def test_ignore_takes_a_rule_name_as_rule_does(cli):
    code = cli("rule", "missing-donation").out.split()[0]
    result = cli("lint", VALUE, "--ignore", "missing-donation", "--format", "json", "-q", "--fail-on", "never")
    assert result.code == 0, result.err
    assert code not in {f["rule"] for t in json.loads(result.out)["targets"] for f in t["findings"]}
    one_line_error(cli("lint", VALUE, "--ignore", "no-such-rule", "-q"),
                   "--ignore: unknown rule 'no-such-rule' in ignore")


def test_rule_prints_byte_thresholds_as_the_config_takes_them(cli):
    from jax_shard_lint.passes.common.byte_sizes import parse_bytes
    from jax_shard_lint.passes.rules.table import all_options

    text = cli("rule", "SL102").out
    shown = re.search(r"loop-collective-bytes \(default (\S+)\)", text).group(1)
    assert shown == "512MiB" and parse_bytes(shown) == all_options()["loop-collective-bytes"].default


def test_schema_covers_fit(cli):
    schema = json.loads(cli("schema", "fit").out)
    assert {"value", "probes"} <= set(schema["properties"])
