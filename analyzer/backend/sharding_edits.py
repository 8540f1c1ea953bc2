"""Edits of a program's stated shardings, made on its StableHLO through jaxlib's
MLIR bindings: the entry function's argument and result ``sdy.sharding``
attributes (and, for a donation no output can reuse for its dtype, a result cast
back to the donated argument's dtype). Python is not traced again and source
locations are kept, so the edited program's findings point at the same user lines;
``rewrite`` pins outputs this way, and lint's fix checks compile a finding's fix
this way.
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir

from ...passes.pipelines.stablehlo_edits import clone, constraint_ops, cotangent_reads, entry_function, module_ops


def sdy_sharding_text(sharding: list[list[str]], mesh_name: str) -> str:
    def axis(label: str) -> str:
        m = re.fullmatch(r"(.+):\((\d+)\)(\d+)", label)
        return f'"{m.group(1)}":({m.group(2)}){m.group(3)}' if m else f'"{label}"'

    dims = ", ".join("{" + ", ".join(axis(a) for a in d) + "}" for d in sharding)
    return f"#sdy.sharding<@{mesh_name}, [{dims}]>"


def _insert_constraints(module: ir.Module, inserted: dict[tuple[int, int], list[list[str]]], mesh_name: str) -> None:
    """An ``sdy.sharding_constraint`` after each named op's result, at the op's source location, read by
    every op that read the result; and, for a matmul's output, one on its cotangent before the backward
    pass's reads of it (``cotangent_reads``): what ``with_sharding_constraint`` written on the value lowers to
    under autodiff, which constrains both."""
    ops = module_ops(module)
    backward = cotangent_reads(module, {index for index, result in inserted if result == 0})
    with module.context:
        for (index, result), sharding in sorted(inserted.items()):
            op = ops[index].operation
            value = op.results[result]
            with ir.InsertionPoint.after(op), op.location:
                constraint = _constraint(value, sharding, mesh_name)
            value.replace_all_uses_except(constraint.result, constraint)
            readers = [ops[j].operation for j in backward.get(index, [])]
            for cotangent in _distinct(r.operands[0] for r in readers):
                first = next(r for r in readers if r.operands[0] == cotangent)
                with ir.InsertionPoint(first), first.location:
                    constrained = _constraint(cotangent, sharding, mesh_name).result
                for r in readers:
                    if r.operands[0] == cotangent:
                        r.operands[0] = constrained


def _constraint(value: ir.Value, sharding: list[list[str]], mesh_name: str) -> ir.Operation:
    return ir.Operation.create("sdy.sharding_constraint", results=[value.type], operands=[value],
                               attributes={"sharding": ir.Attribute.parse(sdy_sharding_text(sharding, mesh_name))})


def _distinct(values) -> list[ir.Value]:
    out: list[ir.Value] = []
    for v in values:
        if not any(v == seen for seen in out):
            out.append(v)
    return out


def _staged_chain(module: ir.Module, op: ir.Operation, operand: int, layouts: list[list[list[str]]],
                  mesh_name: str) -> None:
    """A chain of new ``sdy.sharding_constraint`` ops on ``op``'s operand, before it, in order, at its source
    location: the layout ``op`` asks for reached one layout at a time."""
    value = op.operands[operand]
    with module.context:
        for sharding in layouts:
            with ir.InsertionPoint(op), op.location:
                value = ir.Operation.create(
                    "sdy.sharding_constraint", results=[value.type], operands=[value],
                    attributes={"sharding": ir.Attribute.parse(sdy_sharding_text(sharding, mesh_name))}).result
    op.operands[operand] = value


def _cast_results(fn, casts: dict[int, int]) -> None:
    """Each result ``r`` of the entry function converted (``stablehlo.convert``, what ``.astype`` lowers to)
    to the element type of argument ``casts[r]`` before it is returned, and the function's type with it."""
    ftype = ir.FunctionType(ir.TypeAttr(fn.operation.attributes["function_type"]).value)
    results = list(ftype.results)
    ret = list(fn.regions[0].blocks[0].operations)[-1]
    for r, a in sorted(casts.items()):
        value = ret.operands[r]
        with ir.InsertionPoint(ret), ret.location:
            to = ir.RankedTensorType.get(ir.RankedTensorType(value.type).shape,
                                         ir.RankedTensorType(ftype.inputs[a]).element_type)
            cast = ir.Operation.create("stablehlo.convert", results=[to], operands=[value])
        ret.operands[r] = cast.result
        results[r] = to
    fn.operation.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), results))


def with_entry_shardings(module: ir.Module, shardings: dict[int, list[list[str]]], mesh_name: str,
                          arguments: dict[int, list[list[str]]] | None = None,
                          constraints: dict[int, list[list[str]]] | None = None,
                          donors: frozenset[int] = frozenset(),
                          inserted: dict[tuple[int, int], list[list[str]]] | None = None,
                          casts: dict[int, int] | None = None,
                          staged: dict[int, list[list[list[str]]]] | None = None,
                          staged_results: dict[int, list[list[list[str]]]] | None = None,
                          undonated: frozenset[int] = frozenset()) -> str:
    """The module's text with the entry function's results (and ``arguments``)
    pinned to these shardings; ``constraints``: sharding constraints (numbered in
    the module's walk order) given new shardings; ``donors``: arguments donated
    (``jax.buffer_donor``, as jit writes a donation it leaves to XLA to match);
    ``inserted``: (an op's index in ``walk_ops`` over the functions, one of its results) -> the sharding
    a new constraint states on that value (what ``with_sharding_constraint`` on it would lower to);
    ``casts``: result -> the argument whose dtype it is returned in (a donation XLA can then reuse);
    ``staged``: sharding constraint (walk order) -> the layouts new constraints state before it, in order;
    ``staged_results``: result -> the same, before the entry function returns it; ``undonated``: arguments
    whose donation is taken away (``jax.buffer_donor`` or ``tf.aliasing_output`` removed: the program
    jit lowers without them in ``donate_argnums``)."""
    edited = clone(module)
    if constraints:
        with edited.context:
            for k, op in enumerate(constraint_ops(edited)):
                if k in constraints:
                    op.attributes["sharding"] = ir.Attribute.parse(sdy_sharding_text(constraints[k], mesh_name))
    for k, op in enumerate(list(constraint_ops(edited)) if staged else []):
        _staged_chain(edited, op, 0, (staged or {}).get(k, []), mesh_name)
    if inserted:
        _insert_constraints(edited, inserted, mesh_name)
    fn = entry_function(edited)
    for r, layouts in sorted((staged_results or {}).items()):
        _staged_chain(edited, list(fn.regions[0].blocks[0].operations)[-1].operation, r, layouts, mesh_name)
    if casts:
        with edited.context:
            _cast_results(fn, casts)
    ftype = ir.FunctionType(ir.TypeAttr(fn.operation.attributes["function_type"]).value)
    with edited.context:
        for key, count, pins in (("res_attrs", len(ftype.results), shardings),
                                 ("arg_attrs", len(ftype.inputs), arguments or {})):
            if not pins and not (key == "arg_attrs" and (donors or undonated)):
                continue
            old = list(ir.ArrayAttr(fn.operation.attributes[key])) if key in fn.operation.attributes \
                else [ir.DictAttr.get({})] * count
            new = []
            for i, attrs in enumerate(old):
                d = ir.DictAttr(attrs)
                entries = {d[k].name: d[k].attr for k in range(len(d))}
                if i in pins:
                    entries["sdy.sharding"] = ir.Attribute.parse(sdy_sharding_text(pins[i], mesh_name))
                if key == "arg_attrs" and i in donors and "tf.aliasing_output" not in entries:
                    entries["jax.buffer_donor"] = ir.BoolAttr.get(True)
                if key == "arg_attrs" and i in undonated:
                    entries.pop("jax.buffer_donor", None)
                    entries.pop("tf.aliasing_output", None)
                new.append(ir.DictAttr.get(entries))
            fn.operation.attributes[key] = ir.ArrayAttr.get(new)
    return str(edited.operation.get_asm(enable_debug_info=True))
