"""Every fix lint prints is compiled before it is shown (analyzer/backend/fix_checks.py).

The oracle is JAX: the fix is applied the way a user would apply it (the
argument's ShapeDtypeStruct given the suggested sharding, or ``jax.jit`` given
the pinned ``out_shardings``), compiled by ``jax.jit(...).lower(...).compile()``,
and XLA's ``memory_analysis()`` of that program is compared with the figures the
finding reports for its fix.
"""

import json
import os
import re

import jax
import pytest
from conftest import EXAMPLES
from hlo_oracle import xla_peak
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from scripts import script_module


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv("JAX_SHARD_LINT_NO_FIX_CHECK", raising=False)


def _module(name):
    return script_module(os.path.join(EXAMPLES, f"{name}.py"))



def _abstract(lowered):
    """The Lowered's positional arguments as ShapeDtypeStructs with their shardings."""
    return _abstract_and_compiled(lowered)[0]


def _abstract_and_compiled(lowered):
    """The Lowered's positional arguments as above, and its compile they are read from: for a target that is
    ``jax.jit(fn).lower(*args)`` (no jit options), the program as written, which the test then need not
    lower and compile again (the main example: about 10 s of a CPU compile)."""
    compiled = lowered.compile()
    args = jax.tree.map(lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
                        lowered.args_info[0], compiled.input_shardings[0])
    return args, compiled


def _lint(cli, *args):
    result = cli("lint", *args, "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_gather_fix_is_the_state_axis_and_compiles_to_the_reported_peak(cli, checking):
    """The headline case: a table sharded on the axis an interpolation reads. The fix names the
    argument and moves its axis to the state dimension; JAX compiles that layout to the peak the
    finding reports, which is lower than the program as written."""
    report = _lint(cli, os.path.join(EXAMPLES, "value_function_step.py"), "--target", "sharded_on_grid")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL101"]
    assert f["parameter"] == "v_next" and f["parameter_sharding"] == [[], ["x"]]
    assert f["suggested_sharding"] == [["x"], []]
    check = f["fix_check"]
    assert check["verdict"] == "better" and "checked:" in f["fix"]

    module = _module("value_function_step")
    # The target is jax.jit(bellman_step) on these arguments: its compile is the program as written.
    (v_next, grid, income, choices), as_written = _abstract_and_compiled(
        module.shard_lint_targets()["sharded_on_grid"])
    fixed = jax.ShapeDtypeStruct(v_next.shape, v_next.dtype, sharding=NamedSharding(v_next.sharding.mesh, P("x")))
    with_fix = jax.jit(module.bellman_step).lower(fixed, grid, income, choices)
    assert check["peak_bytes_before"] == xla_peak(as_written)
    assert check["peak_bytes_after"] == xla_peak(with_fix.compile())
    assert check["peak_bytes_after"] < check["peak_bytes_before"]


def test_main_example_offers_no_fix_that_makes_the_step_worse(cli, checking):
    """README's main example: pinning every state output back (SL201's usual fix) raises the peak,
    which JAX confirms; the report does not offer it, and SL201/SL203 on the same values give one
    recommendation."""
    report = _lint(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))
    [t] = report["targets"]
    checks = [f["fix_check"] for f in t["findings"] if f["fix_check"]]
    assert checks
    for f in t["findings"]:
        c = f["fix_check"]
        if c is None:
            continue
        # A fix shown as the fix never raises both figures.
        if c["verdict"] == "worse":
            assert not f["fix"].startswith(("shard", "pin", "trade-off")), f["fix"]
    pin_text = [w for w in t["warnings"] if w.startswith("the out_shardings= pinning every state output")]

    module = _module("fsdp_tp_train_step")
    # The target is jax.jit(train_step) on these arguments (no out_shardings, no donation): as written.
    args, as_written = _abstract_and_compiled(module.shard_lint_targets()["train_step"])
    before = xla_peak(as_written)
    pinned = jax.jit(module.train_step, out_shardings=(
        jax.tree.map(lambda x: x.sharding, args[0]), jax.tree.map(lambda x: x.sharding, args[1]),
        NamedSharding(args[2].sharding.mesh, P()))).lower(*args).compile()
    if xla_peak(pinned) > before:
        assert pin_text and t["suggested_out_shardings"] is None
    state = {f["fix"] for f in t["findings"] if f["rule"] in ("SL201", "SL203") and f["subject"] in (
        "params['embed']", "result[0]['embed']")}
    assert len(state) == 1, state  # one recommendation for params['embed'], whichever rule found it


def test_a_grouped_state_finding_names_the_fix_its_check_measured(cli, checking):
    """The main example's three moved embedding values as one SL201 group (all under the small-output
    floor): a fix is printed as the fix only when its check measured it better; here taking the
    returned layouts is a trade-off (JAX: lower peak, more traffic) and pinning raises the peak, so
    the group is no finding (nothing to act on) and one line says what both fixes measured."""
    report = _lint(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"),
                   "--threshold", "output-mismatch-min-bytes=1GiB")
    [t] = report["targets"]
    grouped = [f for f in t["findings"] if f["rule"] == "SL201"]
    if grouped:
        [f] = grouped
        assert f["count"] == 3 and f["fix_check"]["verdict"] == "better"
        assert f["fix"].startswith(("shard", "give", "pin")), f["fix"]
    else:
        [line] = [w for w in t["warnings"] if w.startswith("3 small outputs come back")]
        assert "neither pinning them nor giving the inputs the returned layout is measured better" in line
        assert "(pinning: peak +" in line and "; the returned layout: peak " in line


def test_no_printed_fix_was_measured_no_change_or_worse(cli, checking):
    """Every fix with a check is printed as the fix only when the check measured it better; the
    main example's embedding and its two optimizer moments are one SL201 and one SL203 (not three
    each), with one recommendation between them, which names SL203's own suggestion tried."""
    report = _lint(cli, os.path.join(EXAMPLES, "fsdp_tp_train_step.py"))
    [t] = report["targets"]
    for f in t["findings"]:
        c = f["fix_check"]
        if c is not None and c["verdict"] != "better":
            assert f["fix"].startswith(("neither fix is measured better", "no sharding change")), f["fix"]
    state = [f for f in t["findings"] if f["rule"] in ("SL201", "SL203")]
    assert sorted(f["rule"] for f in state) == ["SL201", "SL203"]
    for f in state:
        assert f["count"] == 3
        assert sorted(f["parameters"]) == ["opt_state['mu']['embed']", "opt_state['nu']['embed']",
                                           "params['embed']"]
    assert len({f["fix"] for f in state}) == 1
    [sl203] = [f for f in state if f["rule"] == "SL203"]
    if sl203["fix_check"]["verdict"] != "better":
        assert "-> P(" in sl203["fix"] and "was tried, compiled and" in sl203["fix"]


def test_ignoring_sl201_does_not_skip_the_check_of_the_printed_out_shardings(cli, checking):
    """The suggested out_shardings are printed whether or not SL201 is reported, so they are compiled
    either way: on the SL104 fixture, pinning at_once's output costs traffic (the text is withheld with
    the measured cost), with SL201 reported or ignored alike."""
    script = os.path.join("fixtures", "scripts", "sl104_involuntary_full_rematerialization.py")
    plain, ignored = (_lint(cli, script, "--target", "at_once", *extra) for extra in ((), ("--ignore", "SL201")))
    for report in (plain, ignored):
        [t] = report["targets"]
        assert t["suggested_out_shardings"] is None
        assert any("pinning every state output was compiled and is not offered" in w for w in t["warnings"])
    assert not any(f["rule"] == "SL201" for f in ignored["targets"][0]["findings"])


_COLLECTIVE = re.compile(r"%?([\w.-]+) = (\(.*?\)|\w+\[[\d,]*\]\S*) "
                         r"(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\(")
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_WIDTH = {"f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "pred": 1, "s8": 1, "u8": 1, "f64": 8, "s64": 8}


def _collectives(compiled):
    """(name, kind, per-device result bytes) of every collective in XLA's compiled module (a combined
    one's tuple added up; no loops in these programs)."""
    out = []
    for name, result, kind in _COLLECTIVE.findall(compiled.as_text()):
        total = 0
        for dtype, dims in _ARRAY.findall(result):
            n = 1
            for d in filter(None, dims.split(",")):
                n *= int(d)
            total += n * _WIDTH[dtype]
        out.append((name, kind, total))
    return out


def _collective_bytes(compiled):
    return sum(b for _, _, b in _collectives(compiled))


def _fixture(name):
    path = os.path.join("fixtures", "scripts", f"{name}.py")
    return path, script_module(path)


def test_sl203_fix_is_compiled_and_printed_only_when_measured_better(cli, checking):
    """SL203's suggestion is compiled like every other fix. The replicated 128 MiB table that a lookup
    gathers rows from: both mesh axes on the rows (P(('data', 'model')), the most devices a dimension
    allows) is a trade-off (peak down, traffic up by more than the tolerance) and is not offered; the same
    axes on the columns are tried next and printed, with the peak and the traffic XLA compiles that layout to."""
    script, module = _fixture("sl203_replicated_argument")
    report = _lint(cli, script, "--target", "replicated")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL203"]
    check = f["fix_check"]
    assert check is not None and check["verdict"] == "better", f
    assert f["fix"].startswith("shard table as P(None, ('data', 'model')) (checked:"), f["fix"]

    table, ids = _abstract(module.shard_lint_targets()["replicated"])
    as_written = jax.jit(module.lookup).lower(table, ids).compile()
    fixed_table = jax.ShapeDtypeStruct(table.shape, table.dtype,
                                       sharding=NamedSharding(ids.sharding.mesh, P(None, ("data", "model"))))
    fixed = jax.jit(module.lookup).lower(fixed_table, ids).compile()
    assert check["peak_bytes_before"] == xla_peak(as_written)
    assert check["peak_bytes_after"] == xla_peak(fixed) < xla_peak(as_written)
    assert check["traffic_bytes_before"] == _collective_bytes(as_written)
    assert check["traffic_bytes_after"] == _collective_bytes(fixed)
    # better within the stated tolerance: the traffic it adds is under 1% of the peak as written
    assert _collective_bytes(fixed) - _collective_bytes(as_written) <= 0.01 * xla_peak(as_written)


def test_silent_reshards_are_one_finding_naming_the_weight_and_its_fix_removes_them(cli, checking):
    """The 2-layer MLP whose w1 is sharded on the dimension x @ w1 contracts (P('model', None)): XLA
    compiles an all-to-all and an all-gather no stated sharding asked for. One SL105 stands for both
    (their names, read in XLA's compiled text here), names params['w1'] and its PartitionSpec, and its
    fix P(None, 'model') was compiled: the traffic before and after equal XLA's collectives of the
    program as written and of the program with w1 on P(None, 'model'), less by both reshards."""
    script, module = _fixture("sl105_unexplained_reshard")
    report = _lint(cli, script, "--target", "contracted")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL105"]
    assert f["parameter"] == "params['w1']" and f["parameter_sharding"] == [["model"], []]
    assert f["suggested_sharding"] == [[], ["model"]]
    # The state the move leaves (w2) comes back as taken without a pin: none is asked for (polish18's F5).
    assert f["fix"].startswith("shard params['w1'] as P(None, 'model') instead of P('model'), and return it in that "
                               "layout (out_shardings=) (checked:"), f["fix"]
    assert f["fix_check"]["verdict"] == "better"

    written = jax.jit(module.step, donate_argnums=(0,)).lower(*module.arguments(P("model", None))).compile()
    fixed = jax.jit(module.step, donate_argnums=(0,)).lower(*module.arguments(P(None, "model"))).compile()
    moved = {name for name, kind, _ in _collectives(written) if kind in ("all-to-all", "all-gather")}
    assert len(moved) == 2 and set(f["ops"] or [f["subject"]]) == moved
    assert f["fix_check"]["traffic_bytes_before"] == _collective_bytes(written)
    assert f["fix_check"]["traffic_bytes_after"] == _collective_bytes(fixed)
    gone = sum(b for name, _, b in _collectives(written) if name in moved)
    assert _collective_bytes(written) - _collective_bytes(fixed) == gone == 256 * 1024**2


def test_a_weight_gathered_beside_an_idle_axis_is_named_and_moving_it_there_is_measured_better(cli, checking):
    """w P('data', None) with the batch on data and the model axis idle: XLA all-gathers the whole weight on
    every device (its one collective, read in XLA's compiled text here), labelled a parameter gather (the
    gather w's sharding asks for). SL101 names w and its PartitionSpec, and its fix, w on the idle axis on
    the dimension the matmul keeps (P(None, 'model')), was compiled: its peak and traffic before and after
    equal XLA's for the program as written and for w on P(None, 'model'), which gathers nothing."""
    script, module = _fixture("sl101_weights_on_data_axis")
    report = _lint(cli, script, "--target", "weight_on_data")
    [t] = report["targets"]
    [gather] = [c for c in t["collectives"] if c["kind"] == "all-gather"]
    assert gather["intent"] == "parameter-gather"
    [f] = t["findings"]
    assert f["rule"] == "SL101" and f["subject"] == gather["hlo_name"]
    assert f["parameter"] == "w" and f["parameter_sharding"] == [["data"], []]
    assert f["suggested_sharding"] == [[], ["model"]]
    assert f["fix"].startswith("shard w as P(None, 'model') instead of P('data') (on the idle axis"), f["fix"]
    assert f["fix_check"]["verdict"] == "better"

    w, x = _abstract(module.shard_lint_targets()["weight_on_data"])
    written = jax.jit(module.step).lower(w, x).compile()
    on_model = jax.ShapeDtypeStruct(w.shape, w.dtype, sharding=NamedSharding(x.sharding.mesh, P(None, "model")))
    fixed = jax.jit(module.step).lower(on_model, x).compile()
    [(name, kind, size)] = _collectives(written)
    assert (name, kind, size) == (gather["hlo_name"], "all-gather", w.size * 4)  # the whole weight, f32
    assert _collectives(fixed) == []
    check = f["fix_check"]
    assert (check["traffic_bytes_before"], check["traffic_bytes_after"]) == (size, 0)
    assert check["peak_bytes_before"] == xla_peak(written)
    assert check["peak_bytes_after"] == xla_peak(fixed) < xla_peak(written)


def test_lint_and_check_on_its_snapshot_give_the_same_recommendation(cli, checking, tmp_path):
    """check compiles a snapshot's fixes the way lint compiles the script's (the StableHLO's shardings
    edited; no Python run): on README's main example every finding has the same fix and suggested
    spec from both, and neither offers the out_shardings pinning lint measured to raise the peak."""
    script = os.path.join(EXAMPLES, "fsdp_tp_train_step.py")
    linted = _lint(cli, script)["targets"][0]
    snap = cli("snapshot", script, "-o", str(tmp_path / "snap"))
    assert snap.code == 0, snap.err
    result = cli("check", str(tmp_path / "snap" / "train_step.mlir"), "--format", "json", "--fail-on", "never")
    assert result.code == 0, result.err
    [checked] = json.loads(result.out)["targets"]

    def advice(t):
        return {(f["rule"], f["subject"]): (f["fix"], f["suggested_sharding"], f["fix_check"]) for f in t["findings"]}

    assert advice(checked) == advice(linted)
    assert checked["suggested_out_shardings"] == linted["suggested_out_shardings"] is None
    state = [f for f in checked["findings"] if f["rule"] in ("SL201", "SL203")]
    assert state and not any(f["fix"].startswith("pin it with out_shardings") for f in state)


def test_sl104_staged_layouts_are_compiled_and_printed_with_what_xla_measures(cli, checking):
    """SL104's fix (reshard one axis at a time) is compiled before it is printed: the intermediate layout
    inserted as a constraint before the one that asks for the value's layout. The check's figures are
    XLA's for that program written by hand with with_sharding_constraint: fewer collective bytes and a
    lower peak than the full rematerialization as written."""
    script, module = _fixture("sl104_involuntary_full_rematerialization")
    report = _lint(cli, script, "--target", "at_once", "--ignore", "SL201")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL104"]
    check = f["fix_check"]
    assert check is not None and check["verdict"] == "better", f
    assert f["fix"].startswith("reshard it one axis at a time"), f["fix"]
    assert "(checked:" in f["fix"] and "producer and its reader" not in f["fix"]

    lowered = module.shard_lint_targets()["at_once"]
    [a] = _abstract(lowered)
    m = a.sharding.mesh

    def at_once(a):
        return jax.lax.with_sharding_constraint(a * 2, NamedSharding(m, P(None, ("data", "model"), None)))

    def staged(a):
        b = jax.lax.with_sharding_constraint(a * 2, NamedSharding(m, P("model", "data", None)))
        return jax.lax.with_sharding_constraint(b, NamedSharding(m, P(None, ("data", "model"), None)))

    as_written, fixed = (jax.jit(fn).lower(a).compile() for fn in (at_once, staged))
    assert check["peak_bytes_before"] == xla_peak(as_written)
    assert check["peak_bytes_after"] == xla_peak(fixed) < xla_peak(as_written)
    # The output comes back on another layout than its input in both: the state the next step reshards (its
    # per-device bytes) is counted with the collectives XLA compiled.
    entry = a.size * a.dtype.itemsize // m.size
    assert check["traffic_bytes_before"] == _collective_bytes(as_written) + entry
    assert check["traffic_bytes_after"] == _collective_bytes(fixed) + entry
    assert _collective_bytes(fixed) < _collective_bytes(as_written)
    assert check["traffic_bytes_after"] - entry == _collective_bytes(fixed) < _collective_bytes(as_written)
    assert any(kind == "all-to-all" for _, kind, _ in _collectives(fixed))
    assert not any(kind == "all-gather" for _, kind, _ in _collectives(fixed))


def test_sl104_says_why_staging_is_not_compiled_where_nothing_states_the_layout(cli, checking):
    """The layout asked for is another argument's (b: P(None, ('data', 'model'), None)), which the sum reads
    beside a*2: no with_sharding_constraint and no out_shardings states it, so there is no op to insert the
    staged constraints before. The fix is then printed as advice with that reason, never with figures. What it
    says is read here from the program: XLA compiles the full rematerialization (an all-gather of the whole
    value, its global shape on every device), and the lowered module states the layout only on argument b."""
    script, module = _fixture("sl104_involuntary_full_rematerialization")
    lowered = module.shard_lint_targets()["from_an_argument"]
    text = lowered.as_text()
    assert "sdy.sharding_constraint" not in text
    signature = next(line for line in text.splitlines() if "func.func public @main" in line)
    results = signature.split("->", 1)[1]
    assert "sdy.sharding" not in results  # no out_shardings
    assert signature.count('[{}, {"data", "model"}, {}]') == 1  # b's in_shardings, and nothing else
    compiled = lowered.compile()
    whole = 16 * 64 * 32 * 4
    assert any(kind == "all-gather" and size == whole for _, kind, size in _collectives(compiled))

    report = _lint(cli, script, "--target", "from_an_argument", "--ignore", "SL201")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL104"]
    assert f["fix_check"] is None and "(checked:" not in f["fix"]
    assert f["fix"].startswith("reshard it one axis at a time")
    assert f["fix"].endswith(
        "(advice, not compiled: no with_sharding_constraint or out_shardings in the program states "
        "P(None, ('data', 'model')), so there is no op to stage it before; only b's sharding states it: "
        "propagation gives the value that layout)"), f["fix"]


_PINNED_OUTPUT = '''
import sys
sys.path.insert(0, {scripts!r})
import jax
from _mesh import NamedSharding, P, mesh, spec


def shard_lint_targets():
    m = mesh()
    x = spec(m, (16, 64, 32), P("model", None, "data"))
    f = jax.jit(lambda a: a * 2, out_shardings=NamedSharding(m, P(None, ("data", "model"), None)))
    return {{"pinned_output": f.lower(x)}}
'''


def test_sl104_staged_before_a_pinned_output_is_compiled_too(cli, checking, tmp_path):
    """The layout asked for by out_shardings rather than a constraint: the staged layout is inserted before the
    result is returned, and the check's figures are XLA's for that program written with
    with_sharding_constraint (the intermediate layout, then the same out_shardings)."""
    script = tmp_path / "pinned_output.py"
    script.write_text(_PINNED_OUTPUT.format(scripts=os.path.abspath(os.path.join("fixtures", "scripts"))))
    report = _lint(cli, str(script), "--ignore", "SL201")
    [f] = [f for f in report["targets"][0]["findings"] if f["rule"] == "SL104"]
    check = f["fix_check"]
    assert check is not None and check["verdict"] == "better" and "(checked:" in f["fix"], f

    _, module = _fixture("sl104_involuntary_full_rematerialization")
    [a] = _abstract(module.shard_lint_targets()["at_once"])
    m = a.sharding.mesh
    out = NamedSharding(m, P(None, ("data", "model"), None))
    as_written = jax.jit(lambda a: a * 2, out_shardings=out).lower(a).compile()
    fixed = jax.jit(lambda a: jax.lax.with_sharding_constraint(a * 2, NamedSharding(m, P("model", "data", None))),
                    out_shardings=out).lower(a).compile()
    entry = a.size * a.dtype.itemsize // m.size  # the output on another layout than its input, in both
    assert (check["peak_bytes_before"], check["peak_bytes_after"]) == (xla_peak(as_written), xla_peak(fixed))
    assert check["traffic_bytes_before"] == _collective_bytes(as_written) + entry
    assert check["traffic_bytes_after"] == _collective_bytes(fixed) + entry
    assert _collective_bytes(fixed) < _collective_bytes(as_written)
