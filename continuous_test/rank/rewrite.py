"""Code rewriting for the collective recorder: torch's function bodies compiled again with the recording around them.

::

    torch's function ─► innermost (under its functools.wraps decorators) ─► its code object
      ─► recording_code: its source, parsed from torch's file, each return through HOOK.end,
         the body between HOOK.begin and HOOK.raised, compiled with torch's file and line numbers
      └► else calling_code: a one-line body that passes every parameter to HOOK(index, ...)

Pure: code objects in, code objects out; which functions are rewritten, what a call
records and where, is :mod:`continuous_test.rank.recorder`'s.  ``hook`` is the global
name through which a rewritten body reaches the recorder (``recorder.HOOK``).

Rank side only: never imports the controller.
"""
from __future__ import annotations

import ast
import inspect
import sys
import types
from typing import Any, Dict, List, Optional

__all__ = ["innermost", "recording_code", "calling_code"]


def innermost(fn: Any) -> Any:
    """The function under torch's decorators (``functools.wraps`` chains): the one whose code is torch's body."""
    seen = 0
    while isinstance(getattr(fn, "__wrapped__", None), types.FunctionType) and seen < 8:
        fn, seen = fn.__wrapped__, seen + 1
    return fn


_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


_TOKEN = "__continuous_test_call__"  # the local that holds a call's record between begin and end


def recording_code(code: types.CodeType, index: int, hook: str) -> Optional[types.CodeType]:
    """torch's own body of ``code``, compiled again from its source with the recording around it; None if it cannot be.

    The function's frame stays the one frame between its caller and its body, as
    in torch: a warning's ``stacklevel``, a traceback and the stacks see torch's
    frames and line numbers only.  The body becomes::

        __continuous_test_call__ = HOOK.begin(index, <the parameters>)
        try:
            <torch's body, each ``return x`` as ``return HOOK.end(__continuous_test_call__, x)``>
            return HOOK.end(__continuous_test_call__, None)
        except BaseException:
            HOOK.raised(__continuous_test_call__)
            raise

    compiled from torch's file with its line numbers, its decorators left in
    place (so the code starts at the same line).  A generator, or a body whose
    source is not found as it was compiled, is left to :func:`calling_code`.
    """
    node = _source_node(code)
    if node is None or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in _own_nodes(node)):
        return None
    prologue = _snippet(f"{_TOKEN} = {hook}.begin({index}, {', '.join(_call_arguments(code))})", node.lineno)
    guarded = _snippet(f"try:\n    pass\nexcept BaseException:\n    {hook}.raised({_TOKEN})\n    raise", node.lineno)
    assert isinstance(guarded[0], ast.Try)
    guarded[0].body = [_EndAtReturn(hook).visit(stmt) for stmt in node.body] + _snippet(
        f"return {hook}.end({_TOKEN}, None)", node.lineno)
    node.body = prologue + guarded
    module = compile(ast.Module(body=[node], type_ignores=[]), code.co_filename, "exec", dont_inherit=True)
    found = next((c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name), None)
    if (found is None or found.co_firstlineno != code.co_firstlineno or found.co_freevars
            or found.co_varnames[:found.co_argcount + found.co_kwonlyargcount]
            != code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]):
        return None
    return found


def _source_node(code: types.CodeType) -> Optional[ast.FunctionDef]:
    """The top-level ``def`` that compiled to ``code``, parsed from its lines in the file (torch's, as imported)."""
    import linecache

    lines = linecache.getlines(code.co_filename)
    if not lines or code.co_firstlineno > len(lines) or lines[code.co_firstlineno - 1][:1].isspace():
        return None  # no source, or not a top-level function
    try:
        block = inspect.getblock(lines[code.co_firstlineno - 1:])
        tree = ast.parse("".join(block), code.co_filename)
    except (SyntaxError, IndentationError, ValueError):
        return None
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.FunctionDef) or node.name != code.co_name:
        return None
    return ast.increment_lineno(node, code.co_firstlineno - 1)


def _own_nodes(node: ast.AST) -> List[ast.AST]:
    """The nodes of a function's body, not those of the functions, lambdas and classes defined in it."""
    found: List[ast.AST] = []
    pending = list(ast.iter_child_nodes(node))
    while pending:
        child = pending.pop()
        found.append(child)
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(child))
    return found


def _snippet(source: str, line: int) -> List[ast.stmt]:
    """Statements parsed from ``source``, every node placed at ``line`` (the def's)."""
    body = ast.parse(source).body
    for stmt in body:
        for n in ast.walk(stmt):
            if "lineno" in n._attributes:
                n.lineno = n.end_lineno = line  # type: ignore[attr-defined]
                n.col_offset = n.end_col_offset = 0  # type: ignore[attr-defined]
    return body


class _EndAtReturn(ast.NodeTransformer):
    """``return x`` -> ``return HOOK.end(token, x)``, in the function's own body only."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def visit_Return(self, node: ast.Return) -> ast.Return:  # noqa: N802 - ast's visitor names
        value = node.value if node.value is not None else ast.copy_location(ast.Constant(None), node)
        call = _snippet(f"{self.hook}.end({_TOKEN}, None)", node.lineno)[0].value  # type: ignore[attr-defined]
        call.args[1] = value
        return ast.copy_location(ast.Return(value=ast.copy_location(call, node)), node)

    def _leave(self, node: ast.AST) -> ast.AST:
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _leave


def _call_arguments(code: types.CodeType) -> List[str]:
    """``code``'s parameters as the arguments of a call that passes each one on."""
    names = code.co_varnames
    at = code.co_argcount + code.co_kwonlyargcount
    call = list(names[:code.co_argcount])
    if code.co_flags & _CO_VARARGS:
        call.append("*" + names[at])
        at += 1
    call += [f"{k}={k}" for k in names[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]]
    if code.co_flags & _CO_VARKEYWORDS:
        call.append("**" + names[at])
    return call


def calling_code(code: types.CodeType, index: int, hook: str) -> types.CodeType:
    """A one-line body with ``code``'s parameters that passes them all to the recorder's ``hook`` (its hook ``index``).

    Defaults and annotations stay on the function object, so its signature is
    unchanged; the file, first line and names are torch's, so tracebacks,
    ``inspect.getsource`` and dynamo's rules by file see torch's function.
    """
    names = code.co_varnames
    positional = list(names[:code.co_argcount])
    at = code.co_argcount + code.co_kwonlyargcount
    keyword = list(names[code.co_argcount:at])
    params, call = list(positional), list(positional)
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    if code.co_flags & _CO_VARARGS:
        params.append("*" + names[at])
        call.append("*" + names[at])
        at += 1
    elif keyword:
        params.append("*")
    params += keyword
    call += [f"{k}={k}" for k in keyword]
    if code.co_flags & _CO_VARKEYWORDS:
        params.append("**" + names[at])
        call.append("**" + names[at])
    source = f"def {code.co_name}({', '.join(params)}): return {hook}({index}, {', '.join(call)})"
    namespace: Dict[str, Any] = {}
    exec(compile(source, code.co_filename, "exec"), namespace)
    body = namespace[code.co_name].__code__
    extra = {"co_qualname": getattr(code, "co_qualname")} if sys.version_info >= (3, 11) else {}
    return body.replace(co_firstlineno=code.co_firstlineno, co_name=code.co_name, **extra)
