"""Every collective no stated sharding asked for (intent ``reshard``) of 16 MiB or more per step is
explained by exactly one finding, which names the argument whose sharding causes it (its path and
PartitionSpec), or the with_sharding_constraint that does (its line and spec). A finding stands for a
collective by its ``subject`` (the HLO op) or its ``ops``; the collectives and their bytes are XLA's
compiled program's, as the report lists them."""

import glob
import os
import re
import shlex

import pytest
from ci_deps import needs
from conftest import EXAMPLES, FIXTURES, lint_targets
from scripts import script_targets

THRESHOLD = 16 * 1024**2  # unexplained-reshard-bytes' default

FIXTURE_SCRIPTS = sorted(glob.glob(os.path.join(FIXTURES, "scripts", "sl*.py"))) + [
    os.path.join(FIXTURES, "scripts", "unusable_donation_resharded.py")]
# Known gaps, each with what is unexplained (measured on jax 0.10.2, CPU, 8 devices).
GAPS: dict[str, str] = {}
EXAMPLE_SCRIPTS = [os.path.join(EXAMPLES, f) for f in (
    "value_function_step.py", "lcm_grid_search_kernel.py", "maxtext_like_step.py", "llama_style_step.py",
    "shard_map_tp_step.py", "remat_layer_stack.py", "fsdp_tp_train_step.py")]
# Steps written with model libraries (tests/real_models lints them too): none reshards 16 MiB or more today
# (measured), so each is a guard that a reshard appearing there comes with its finding.
MODEL_SCRIPTS = {"optax_adamw_mlp": ("optax",), "equinox_mlp": ("equinox", "optax"),
                 "nnx_transformer": ("flax", "optax"), "penzai_llama": ("penzai", "optax"),
                 "flax_linen_logical": ("flax",), "gpt2_flax": ("transformers", "flax", "optax"),
                 "llama_flax": ("transformers", "flax", "optax")}


def unexplained(targets) -> list[str]:
    """Each reshard of THRESHOLD or more per step not explained by exactly one finding naming its argument."""
    out = []
    for t in targets:
        for c in t["collectives"]:
            if c["intent"] != "reshard" or c["bytes"] * c["count"] < THRESHOLD:
                continue
            by = [f for f in t["findings"] if f["subject"] == c["hlo_name"] or c["hlo_name"] in f["ops"]]
            # The argument whose sharding causes it, or the user's with_sharding_constraint (its line and spec).
            named = [f for f in by if (f["parameter"] and f["parameter_sharding"] is not None)
                     or (f["constraint"] and f["constraint"]["source"] and f["constraint"]["sharding"])]
            if len(by) != 1 or len(named) != 1:
                out.append(f"{t['name']}: {c['kind']} {c['hlo_name']} ({c['bytes'] * c['count']} B): "
                           f"{[(f['rule'], f['parameter']) for f in by] or 'no finding'}")
    return out


def _param(path, *marks):
    name = os.path.basename(path)
    if name in GAPS:
        marks = (*marks, pytest.mark.xfail(strict=True, reason=GAPS[name]))
    return pytest.param(path, id=name, marks=marks)


@pytest.mark.parametrize("script", [_param(p) for p in FIXTURE_SCRIPTS + EXAMPLE_SCRIPTS]
                         + [_param(os.path.join(EXAMPLES, "models", f"{name}.py"),
                                   *(needs(lib, f"{lib} is not installed (the [test] extra)") for lib in libs))
                            for name, libs in MODEL_SCRIPTS.items()])
def test_every_reshard_is_explained_by_one_finding_naming_its_argument(cli, script):
    m = re.search(r"shard-lint-args:(.*)", open(script).read())  # a rule fixture's own thresholds
    assert unexplained(lint_targets(cli, script, *(shlex.split(m.group(1)) if m else []))) == []


def test_a_reshard_at_the_programs_end_is_the_output_findings(cli):
    """The all-gather XLA adds to return the donated state on another sharding is the SL201 finding's,
    the one finding of the target, which names params['w'] and its P('data', 'model')."""
    targets = {t["name"]: t for t in lint_targets(cli, os.path.join(FIXTURES, "scripts",
                                                                    "unusable_donation_resharded.py"))}
    (gather,) = [c for c in targets["resharded"]["collectives"] if c["intent"] == "reshard"]
    assert gather["bytes"] * gather["count"] >= THRESHOLD
    (finding,) = targets["resharded"]["findings"]
    assert finding["ops"] == [gather["hlo_name"]] and finding["parameter"] == "params['w']"
    assert finding["parameter_sharding"] == [["data"], ["model"]]


def _gathers_feeding_results(hlo_text: str) -> dict[str, int]:
    """The compiled program's all-gathers whose result the ENTRY's ROOT tuple returns (directly or through a
    copy of one operand), each with the index of the result it becomes: read from XLA's text here."""
    entry = hlo_text[hlo_text.index("\nENTRY"):]
    body = entry[:entry.index("\n}")]
    operands = {}
    root: list[str] = []
    for line in body.splitlines()[1:]:
        m = re.match(r"\s*(ROOT )?%(\S+) = .*? (\S+)\((.*?)\)", line)
        if not m:
            continue
        names = re.findall(r"%([\w.\-]+)", m.group(4))
        operands[m.group(2)] = (m.group(3), names)
        if m.group(1):
            root = names
    out = {}
    for index, name in enumerate(root):
        while name in operands and operands[name][0] != "all-gather" and len(operands[name][1]) == 1:
            name = operands[name][1][0]
        if name in operands and operands[name][0] == "all-gather":
            out[name] = index
    return out


def test_gathers_of_replicated_out_shardings_are_the_output_findings(cli):
    """out_shardings=P() over donated params and their moments sharded on 'model': every all-gather XLA adds
    to return them replicated (the ROOT tuple's operands, from compiled.as_text() here) is in the ops of
    exactly one SL201 finding at the jax.jit line that states the out_shardings (the .lower line its via),
    which names the argument it came from and its sharding; no SL101 reports them."""
    path = os.path.join(FIXTURES, "scripts", "sl201_replicated_out_shardings.py")
    (target,) = lint_targets(cli, path)  # first: a trace of the step here would be the one lint reads
    compiled = script_targets(path)["replicated_state"].compile()
    gathers = _gathers_feeding_results(compiled.as_text())
    assert len(gathers) == 6  # params and both moments, two weights each
    lower_line = next(i for i, line in enumerate(open(path), 1) if ".lower(" in line)
    jit_line = next(i for i, line in enumerate(open(path), 1) if "jax.jit(train_step" in line)
    assert not [f for f in target["findings"] if f["rule"] in ("SL101", "SL105")]
    outputs = {t["index"]: t["path"] for t in target["outputs"]}
    for name, index in gathers.items():
        (finding,) = [f for f in target["findings"] if name in f["ops"]]
        assert finding["rule"] == "SL201" and finding["source"]["line"] == jit_line
        assert finding["via"]["line"] == lower_line
        assert outputs[index] == finding["subject"] or outputs[index] in finding["ops"]
        assert finding["parameter"].startswith("params[") and finding["parameter_sharding"] in ([["model"], []],
                                                                                                [[], ["model"]])
        assert "; out_shardings states P() for it" in finding["message"]
