"""Machine-made mutants of the code an attendee writes (issue 29): pure, no backend.

*What is mutated.* The attendee's part of a lab is where its solution differs from its starter:
in a Python file of ``solution/`` that the starter does not have, every function; in one it has,
every function (or method) whose source differs from the starter's function of the same name, or
that the starter does not have. Module-level lines outside functions are left alone (imports,
constants a step hands out).

*The operators* (:data:`OPERATORS`), the standard set of mutation testing (mutmut, cosmic-ray), each
applied at one place at a time:

=============  ==========================================================================
``compare``    ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``, ``in`` ↔ ``not in``
``arith``      ``+`` ↔ ``-``, ``*`` ↔ ``/``, ``//`` → ``/``, ``/`` → ``//``, ``%`` → ``*``, ``**`` → ``*``
``augassign``  ``x += y`` → ``x = y`` (the accumulation dropped), ``-=`` / ``*=`` alike
``boolean``    ``and`` ↔ ``or``, ``not x`` → ``x``, ``True`` ↔ ``False``
``number``     an int constant ±1 (0 → 1), a float constant doubled (0.0 → 1.0)
``slice``      a slice bound or a ``range`` stop moved by one (``a[i:j]`` → ``a[i:j - 1]``, ``range(n)``
               → ``range(n - 1)``)
``drop-call``  a call made for its effect dropped (``stream.wait_stream(s)``, ``buf.copy_(x)``,
               ``out.append(y)`` → ``pass``)
``drop-store`` a store into an element or a field dropped (``cache[slot] = kv``, ``self.n = n`` →
               ``pass``)
``call-arg``   a function call replaced by its first argument (``torch.exp(x)`` → ``x``), a method
               call by its object (``x.float()`` → ``x``)
``swap-args``  the first two positional arguments swapped
``one-pass``   a ``for`` loop that stops after its first pass (``break`` at the end of its body),
               the classic "returns after the first item"
=============  ==========================================================================

Each mutant is a whole new file text where only the mutated statement's lines changed (the rest,
comments included, is kept), so its diff is what a reviewer reads. A mutant's :attr:`Mutation.key`
depends on the file, the operator and the statement's text before and after, not on line numbers,
so ``mutants/equivalent.yaml`` entries survive edits elsewhere in the file.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import textwrap
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

OPERATORS = (
    "compare",
    "arith",
    "augassign",
    "boolean",
    "number",
    "slice",
    "drop-call",
    "drop-store",
    "call-arg",
    "swap-args",
    "one-pass",
)

_COMPARE_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.FloorDiv,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.Pow: ast.Mult,
}
# calls that only print or log: dropping them changes nothing a check should judge
_QUIET_CALLS = {"print", "log", "debug", "info", "warning", "echo", "write_text_log"}


@dataclass(frozen=True)
class Region:
    """Lines ``first..last`` (1-based, inclusive) of ``path`` (relative to the lab folder) that the
    attendee writes: one function of the solution."""

    path: str
    function: str
    first: int
    last: int


@dataclass(frozen=True)
class Mutation:
    path: str  # relative to the lab folder
    function: str
    operator: str
    line: int  # first line of the mutated statement, in the solution's file
    before: str  # the statement's original lines
    after: str  # what replaces them
    text: str  # the whole mutated file

    @property
    def key(self) -> str:
        """Stable across edits elsewhere: file, operator, and the statement before and after."""
        digest = hashlib.sha1(
            f"{self.path}\0{self.operator}\0{self.before.strip()}\0{self.after.strip()}".encode()
        )
        return digest.hexdigest()[:10]

    def diff(self, original: str) -> str:
        return "".join(
            difflib.unified_diff(
                original.splitlines(keepends=True),
                self.text.splitlines(keepends=True),
                f"a/{self.path}",
                f"b/{self.path}",
                n=1,
            )
        )

    @property
    def summary(self) -> str:
        """``path:line [operator] before -> after``, cut to where the two differ (with context)."""
        one, two = _canonical(self.before), _canonical(self.after)
        start = 0
        while start < min(len(one), len(two)) and one[start] == two[start]:
            start += 1
        end = 0
        while end < min(len(one), len(two)) - start and one[-1 - end] == two[-1 - end]:
            end += 1
        lo = max(0, start - 30)

        def cut(text: str) -> str:
            hi = min(len(text), len(text) - end + 30)
            return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")

        return f"{self.path}:{self.line} [{self.operator}] {cut(one)} -> {cut(two)}"


def _canonical(code: str) -> str:
    """``code`` on one line as ``ast.unparse`` writes it (quotes, commas), so that a mutant's
    before and after differ only where the mutation is; a header line (``for ...:``) too."""
    text = textwrap.dedent(code).strip()
    for attempt in (text, text + "\n    pass"):
        try:
            lines = ast.unparse(ast.parse(attempt)).splitlines()
        except SyntaxError:
            continue
        return " ".join(" ".join(line.split()) for line in (lines if attempt is text else lines[:1]))
    return " ".join(text.split())


# -- which code is the attendee's ------------------------------------------------------------------


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions and methods by qualified name (``Class.method``), outermost definitions only."""
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + node.name] = node
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(getattr(tree, "body", []), "")
    return out


def _imported_names(tree: ast.Module) -> frozenset[str]:
    """Names the module binds by ``import`` (modules, and classes from ``from x import Y``): a call
    on one of them is a function call, not a method of an object."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def attendee_regions(solution: Path, starter: Path) -> list[Region]:
    """The functions of ``solution``'s Python files that differ from ``starter``'s (see the module
    docstring), in file and line order; files that do not parse are left out."""
    regions: list[Region] = []
    for path in sorted(solution.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(solution).as_posix()
        text = path.read_text()
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        theirs = starter / rel
        before: dict[str, str] = {}
        if theirs.is_file():
            try:
                old = theirs.read_text()
                before = {n: ast.dump(f) for n, f in _functions(ast.parse(old)).items()}
            except SyntaxError:
                before = {}
        for name, fn in _functions(tree).items():
            # compared as syntax trees: a function that differs from the starter's only in comments
            # or layout is the starter's, not the attendee's
            if before.get(name) != ast.dump(fn):
                regions.append(Region(rel, name, fn.lineno, fn.end_lineno or fn.lineno))
    return regions


# -- the operators -----------------------------------------------------------------------------------


Edit = Callable[[ast.AST, ast.stmt], bool]  # changes a node of a copied statement (the copy given)


def _edits(node: ast.AST, modules: frozenset[str]) -> Iterator[tuple[str, Edit]]:
    """Every (operator, edit) that applies to ``node``; an edit is applied to the node's twin in a
    deep copy of its statement."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swap = _COMPARE_SWAP.get(type(op))
            if swap is not None:
                yield "compare", _setter(partial(_put, "ops", i, swap))
    elif isinstance(node, ast.BinOp):
        arith = _ARITH_SWAP.get(type(node.op))
        if arith is not None and not _is_string_format(node):
            yield "arith", _setter(partial(_put, "op", None, arith))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield "boolean", _setter(partial(_put, "op", None, other))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "boolean", lambda n, root: _replace_in(root, n, n.operand)  # type: ignore[attr-defined]
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            yield "boolean", _setter(partial(_put_value, not value))
        elif isinstance(value, int):
            for new in (value + 1, value - 1) if value else (1,):
                yield "number", _setter(partial(_put_value, new))
        elif isinstance(value, float):
            yield "number", _setter(partial(_put_value, value * 2 if value else 1.0))
    elif isinstance(node, ast.Slice):
        for bound, delta in (("lower", 1), ("upper", -1)):
            if getattr(node, bound) is not None:
                yield "slice", _setter(partial(_shift, bound, None, delta))
    elif isinstance(node, ast.Call):
        name = _call_name(node)
        if name == "range" and node.args:
            yield "slice", _setter(partial(_shift, "args", 0 if len(node.args) == 1 else 1, -1))
        if name in _QUIET_CALLS or (isinstance(node.func, ast.Name) and name in _PLAIN_CALLS):
            return
        args = node.args
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        if receiver is not None and _root_name(receiver) not in modules:
            # a method: the call dropped, its object kept (x.float() -> x, q.clamp(0, 1) -> q)
            yield "call-arg", lambda n, root: _replace_in(root, n, n.func.value)  # type: ignore[attr-defined]
        elif args and not isinstance(args[0], ast.Starred):
            yield "call-arg", lambda n, root: _replace_in(root, n, n.args[0])  # type: ignore[attr-defined]
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
            yield "swap-args", _setter(_swap_first_two)


_PLAIN_CALLS = {"range", "len", "int", "float", "str", "bool", "isinstance", "list", "tuple", "dict", "set"}


def _put(field: str, index: int | None, cls: type, node: Any) -> None:
    """``node.field = cls()`` (or its ``index``-th item)."""
    if index is None:
        setattr(node, field, cls())
    else:
        getattr(node, field)[index] = cls()


def _put_value(value: object, node: Any) -> None:
    node.value = value


def _shift(field: str, index: int | None, delta: int, node: Any) -> None:
    """``node.field`` (or its ``index``-th item) plus ``delta``."""
    if index is None:
        setattr(node, field, _plus(getattr(node, field), delta))
    else:
        getattr(node, field)[index] = _plus(getattr(node, field)[index], delta)


def _swap_first_two(node: Any) -> None:
    node.args[0], node.args[1] = node.args[1], node.args[0]


def _setter(change: Callable[[Any], object]) -> Edit:
    def edit(node: ast.AST, root: ast.stmt) -> bool:
        change(node)
        return True

    return edit


def _stmt_edits(stmt: ast.stmt) -> Iterator[tuple[str, Callable[[ast.stmt], ast.stmt]]]:
    """Operators that replace a whole statement (applied to a deep copy)."""
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and _call_name(stmt.value) not in _QUIET_CALLS
    ):
        yield "drop-call", lambda s: ast.Pass()
    if isinstance(stmt, ast.Assign) and all(
        isinstance(t, ast.Subscript | ast.Attribute) for t in stmt.targets
    ):
        yield "drop-store", lambda s: ast.Pass()
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add | ast.Sub | ast.Mult):
        yield "augassign", lambda s: ast.Assign(targets=[s.target], value=s.value, lineno=s.lineno)  # type: ignore[attr-defined]
    if isinstance(stmt, ast.For | ast.AsyncFor) and not isinstance(stmt.body[-1], ast.Break | ast.Return):
        yield "one-pass", _one_pass


def _one_pass(stmt: ast.stmt) -> ast.stmt:
    assert isinstance(stmt, ast.For | ast.AsyncFor)
    stmt.body = [*stmt.body, ast.Break()]
    return stmt


def _root_name(expr: ast.expr) -> str:
    """``torch`` for ``torch.npu``: the name an attribute chain starts from ("" for a call's result)."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else ""


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _is_string_format(node: ast.BinOp) -> bool:
    sides = (node.left, node.right)
    if any(isinstance(side, ast.JoinedStr) for side in sides):
        return True
    return isinstance(node.op, ast.Mod | ast.Add) and any(
        isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides
    )


def _plus(expr: ast.expr, delta: int) -> ast.expr:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return ast.Constant(expr.value + delta)
    return ast.BinOp(expr, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta)))


# -- applying one edit to a copy of one statement ------------------------------------------------------


def _own_nodes(stmt: ast.stmt) -> Iterator[ast.AST]:
    """The nodes of ``stmt`` itself: for a compound statement its header (test, iter, items), not
    the statements of its body, which are mutated on their own."""
    skip = {"body", "orelse", "finalbody", "handlers", "decorator_list", "cases"}
    for name, value in ast.iter_fields(stmt):
        if name in skip:
            continue
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, ast.AST):
                yield from ast.walk(child)


def _replace_in(root: ast.AST, target: ast.AST, new: ast.AST) -> bool:
    for parent in ast.walk(root):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, new)
                return True
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = new
                        return True
    return False


def _statements(fn: ast.AST) -> Iterator[ast.stmt]:
    for node in ast.walk(fn):
        if isinstance(node, ast.stmt) and node is not fn:
            yield node


def _header_text(stmt: ast.stmt) -> str | None:
    """The unparsed first line of a compound statement (its body elided), or None."""
    if not hasattr(stmt, "body") or isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return None
    shell = copy.copy(stmt)
    for name in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(shell, name):
            setattr(shell, name, [ast.Pass()] if name == "body" else [])
    if isinstance(shell, ast.Try):
        shell.handlers = [ast.ExceptHandler(type=None, name=None, body=[ast.Pass()])]
    return ast.unparse(shell).splitlines()[0]


def _render(lines: list[str], stmt: ast.stmt, op: str, new: ast.stmt) -> tuple[str, str, str]:
    """(whole new file text, original lines, new lines) with ``stmt`` replaced by ``new``. Only
    what changed is rewritten: for ``one-pass`` a ``break`` line after the loop's body, for an edit
    of a compound statement's one-line header that line, else the statement's own lines."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    indent = _indent(lines[first - 1])
    body: list[ast.stmt] = getattr(stmt, "body", [])
    if op == "one-pass":
        end = body[-1].end_lineno or body[-1].lineno
        before = "".join(lines[first - 1 : end])
        after = before + _indent(lines[body[0].lineno - 1]) + "break\n"
        return "".join(lines[: first - 1]) + after + "".join(lines[end:]), before, after
    header_end = max((getattr(n, "end_lineno", 0) or 0 for n in _own_nodes(stmt)), default=first)
    if body and header_end == first and (header := _header_text(new)) is not None:
        last = first  # a one-line header: the body keeps its lines and comments
        code, hash_, comment = lines[first - 1].rstrip("\n").partition("  #")
        after = indent + header + (f"  #{comment}" if hash_ else "") + "\n"
    else:
        after = "".join(indent + line + "\n" for line in ast.unparse(new).splitlines())
    before = "".join(lines[first - 1 : last])
    return "".join(lines[: first - 1]) + after + "".join(lines[last:]), before, after


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def mutations(text: str, path: str, regions: list[Region]) -> list[Mutation]:
    """Every single-place mutant of the functions in ``regions`` (all of ``path``'s regions), in
    line order; mutants that do not compile, or that leave the text as it was, are left out."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    fns = _functions(tree)
    modules = _imported_names(tree)
    out: list[Mutation] = []
    seen: set[str] = set()
    for region in regions:
        fn = fns.get(region.function)
        if fn is None:
            continue
        for stmt in _statements(fn):
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            candidates: list[tuple[str, ast.stmt]] = [
                (op, make(copy.deepcopy(stmt))) for op, make in _stmt_edits(stmt)
            ]
            for index, node in enumerate(_own_nodes(stmt)):
                for op, edit in _edits(node, modules):
                    clone = copy.deepcopy(stmt)
                    if edit(list(_own_nodes(clone))[index], clone):
                        candidates.append((op, clone))
            for op, new in candidates:
                new_text, before, after = _render(lines, stmt, op, new)
                if new_text == text or before.strip() == after.strip():
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a mutant may be odd code ("x[0] is 1")
                        compile(new_text, path, "exec")
                except SyntaxError:
                    continue
                m = Mutation(path, region.function, op, stmt.lineno, before, after, new_text)
                if m.key in seen:
                    continue
                seen.add(m.key)
                out.append(m)
    return out
