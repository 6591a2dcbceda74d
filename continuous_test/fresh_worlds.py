"""Tests of a shared-world class that run in a world of their own: ``@fresh_world`` and ``fresh_world_tests``.

Most tests of a suite can share one world; a few cannot, because they change
the world itself: they destroy or re-create the default process group, change
an environment variable that ``init_process_group`` reads (``MASTER_PORT``),
or end a rank on purpose.  In torch's own suites every test pays for fresh
processes because of those few.  Here a :class:`~continuous_test.MultiProcContinuousTest`
keeps its shared world for every other test and gives each of those a world of
its own, chosen by any of:

* ``@fresh_world`` on the test method;
* the class attribute ``fresh_world_tests``: test names or ``fnmatch`` patterns
  (``{"test_destroy_*", "test_ddp_uneven_inputs"}``), or a rule, a callable
  ``rule(cls, name) -> bool``, which is how a suite whose test methods you do not
  own (a mixin from another package) chooses them;
* :func:`changes_its_world`, a ready-made rule that reads the test's source
  (and, through ``self.<helper>(...)`` calls, its class's helpers' sources) for
  the calls and assignments above.  ``fresh_world_tests = changes_its_world``
  applies it; :func:`either` combines it with names or patterns of your own.

A world of its own is started for the test as the class's shared world is
(ranks forked from the template, ``_init_pg``, ``setUp`` and ``tearDown`` on
every rank), runs that one test and is stopped after it, so the test sees what
a fresh process would give it, and leaves nothing behind for the next test.
Its leak check is off (nothing it leaves can reach another test), and a failure
is not rerun or bisected (there are no earlier tests in its world).  Under a
launcher (torchrun, srun) the launch is the only world: such a test runs in it
like any other.

Fresh groups in warm ranks: ``@fresh_group`` and ``fresh_group_tests`` (the same
forms) choose tests that need a pristine default group but not new processes.
Before such a test every rank destroys the default group and every subgroup and
makes the default group again (the class's ``_init_pg``) on a rendezvous file of
its own, so the test sees sequence numbers at 0 and no subgroups, in the ranks
that ran the tests before it.  Its leak check, rerun and bisect are those of any
test of the shared world.

What this module touches: nothing.  It reads the class's attributes and, for
:func:`changes_its_world`, the test's source (``inspect.getsource``, once per
function).  Stdlib only (a leaf).
"""
from __future__ import annotations

import ast
import fnmatch
import functools
import inspect
import textwrap
from typing import Any, Callable, Iterable, Iterator, List, Optional, Set, TypeVar, Union

from continuous_test import sizes
from continuous_test.errors import ConfigError

__all__ = ["fresh_world", "fresh_group", "changes_its_world", "either", "wanted", "group_wanted", "FRESH_WORLD_ATTR",
           "FRESH_GROUP_ATTR", "BAD_FRESH_WORLD_TESTS", "ONE_SHOT_FRESH_WORLD_TESTS"]

FRESH_WORLD_ATTR = "__continuous_test_fresh_world__"
FRESH_GROUP_ATTR = "__continuous_test_fresh_group__"
BAD_FRESH_WORLD_TESTS = ("{where} must be test names or fnmatch patterns (str, or a list, set or dict of them), "
                         "or a callable rule(cls, name) -> bool such as continuous_test.changes_its_world; "
                         "got {value!r}")
ONE_SHOT_FRESH_WORLD_TESTS = ("{where} is an iterator ({value!r}), which is read only once and would choose "
                              "nothing after the first test: give a list, set or tuple of names or patterns")

F = TypeVar("F", bound=Callable[..., Any])
Rule = Callable[[type, str], bool]

# Modules whose ``.exit``/``._exit``/``.abort`` end the process (``sys.exit``, ``os._exit``, ``os.abort``).
_PROCESS_ENDERS = {"sys", "os"}
# multiprocess.EXPECT_EXIT_ATTR, which a leaf cannot import: a test declared to end its ranks.
_EXPECT_EXIT_ATTR = "__continuous_test_expect_exit__"
# Environment variables ``init_process_group`` and the rendezvous read.
_INIT_VARIABLES = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "INIT_METHOD"}


def fresh_world(fn: F) -> F:
    """Decorator: this test runs in a world of its own (fresh ranks and default group), not the class's shared one."""
    setattr(fn, FRESH_WORLD_ATTR, True)
    return fn


def fresh_group(fn: F) -> F:
    """Decorator: this test runs in the class's warm ranks on a default group made again for it, and no subgroups."""
    setattr(fn, FRESH_GROUP_ATTR, True)
    return fn


def either(*choices: Union[Rule, Iterable[str]]) -> Rule:
    """A rule that picks a test when any of ``choices`` (rules, or names and patterns) picks it."""
    rules = [_as_rule(choice, "each argument of either()") for choice in choices]
    return lambda cls, name: any(rule(cls, name) for rule in rules)


def wanted(cls: type, method: str) -> bool:
    """Whether test ``method`` of ``cls`` (a sized name ``test_x[ws2]`` too) runs in a world of its own.

    Raises ConfigError naming the class when ``fresh_world_tests`` is neither
    names and patterns nor a rule.
    """
    return _chosen(cls, method, FRESH_WORLD_ATTR, "fresh_world_tests")


def group_wanted(cls: type, method: str) -> bool:
    """Whether test ``method`` of ``cls`` runs on a fresh default group in the warm ranks (``@fresh_group``).

    Raises ConfigError naming the class when ``fresh_group_tests`` is neither
    names and patterns nor a rule.
    """
    return _chosen(cls, method, FRESH_GROUP_ATTR, "fresh_group_tests")


def _chosen(cls: type, method: str, attr: str, choice_attr: str) -> bool:
    sized = sizes.parse(method)
    base = sized[0] if sized else method
    function = getattr(cls, method, None) or getattr(cls, base, None)
    if any(getattr(f, attr, False) for f in _wrapped_chain(function)):
        return True
    choice = getattr(cls, choice_attr, None)
    if choice is None:
        return False
    return bool(_as_rule(choice, f"{cls.__qualname__}.{choice_attr}")(cls, base))


def _as_rule(choice: Any, where: str) -> Rule:
    """``choice`` (a rule, or names and patterns: any iterable of str, a dict's keys too) as a rule."""
    if callable(choice):
        return choice
    if isinstance(choice, Iterator):  # read once, it would choose for the first test only
        raise ConfigError(ONE_SHOT_FRESH_WORLD_TESTS.format(where=where, value=choice))
    patterns = (choice,) if isinstance(choice, str) else None
    if patterns is None and isinstance(choice, Iterable):
        patterns = tuple(choice)
    if patterns is None or not all(isinstance(p, str) for p in patterns):
        raise ConfigError(BAD_FRESH_WORLD_TESTS.format(where=where, value=choice))
    return lambda cls, name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def changes_its_world(cls: type, name: str) -> bool:
    """The ready-made rule: whether test ``name`` of ``cls`` changes its world, read from its source.

    True when the test, or a helper of its class it calls as ``self.<helper>(...)``
    (followed through any depth), does any of:

    * calls ``init_process_group``, or ``destroy_process_group`` with no group
      argument or ``None`` (the default group; destroying a subgroup it made is fine);
    * calls ``sys.exit``, ``os._exit`` or ``os.abort``, under any name (``from os
      import _exit``, ``import os as o``), or raises ``SystemExit``;
    * assigns, deletes, updates, pops or sets by default ``os.environ["MASTER_PORT"]``
      (``os.environ.update(MASTER_PORT=...)``; or another variable the
      rendezvous reads: ``MASTER_ADDR``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
      ``INIT_METHOD``);
    * is declared to end its ranks (``expect_exit``).

    A test whose source cannot be read is not picked.
    """
    return _changes(cls, name, set())


def _changes(cls: type, name: str, seen: Set[str]) -> bool:
    if name in seen:
        return False
    seen.add(name)
    function = inspect.getattr_static(cls, name, None)
    function = getattr(function, "__func__", function)
    if function is None or not callable(function):
        return False
    if any(hasattr(f, _EXPECT_EXIT_ATTR) for f in _wrapped_chain(function)):
        return True
    found = _scan(inspect.unwrap(function))
    if found is None:
        return False
    changes, helpers = found
    return changes or any(_changes(cls, helper, seen) for helper in sorted(helpers))


def _wrapped_chain(function: Any) -> Iterable[Any]:
    """``function`` and each function it wraps (``__wrapped__``), outermost first."""
    while function is not None:
        yield function
        function = getattr(function, "__wrapped__", None)


@functools.lru_cache(maxsize=None)
def _scan(function: Callable) -> Optional[tuple]:
    """(whether the body changes its world, the ``self.<name>`` methods it calls); None without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    changes = False
    helpers: Set[str] = set()
    names = _names(function, tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func
            called = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", None)
            if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == "self":
                helpers.add(callee.attr)
            if called in ("init_process_group",):
                changes = True
            elif called == "destroy_process_group" and _default_group(node):
                changes = True
            elif _ends_process(callee, names) or _sets_init_variable(node):
                changes = True
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            changes = changes or (isinstance(raised, ast.Name) and names.get(raised.id, raised.id) == "SystemExit")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            changes = changes or any(_init_variable(target) for target in targets)
    return changes, frozenset(helpers)


def _names(function: Callable, tree: ast.AST) -> dict:
    """What names in the test mean, as dotted paths: its module's imports and its own (``_exit`` -> ``os._exit``)."""
    names: dict = {}
    for name, value in getattr(function, "__globals__", {}).items():
        if inspect.ismodule(value):
            names[name] = value.__name__
        elif callable(value) and getattr(value, "__module__", None) in ("posix", "nt", "os", "sys"):
            names[name] = f"{'os' if value.__module__ in ('posix', 'nt') else value.__module__}.{value.__name__}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({alias.asname or alias.name: alias.name for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update({alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names})
    return names


_ENDERS = {f"{module}.{name}" for module in _PROCESS_ENDERS for name in ("exit", "_exit", "abort")}


def _ends_process(callee: ast.AST, names: dict) -> bool:
    """Whether a call of ``callee`` is ``sys.exit``, ``os._exit`` or ``os.abort``, under whatever name."""
    if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name):
        return f"{names.get(callee.value.id, callee.value.id)}.{callee.attr}" in _ENDERS
    return isinstance(callee, ast.Name) and names.get(callee.id) in _ENDERS


def _default_group(call: ast.Call) -> bool:
    """Whether a ``destroy_process_group`` call names no group, or ``None`` (the default group)."""
    given = list(call.args[:1]) + [k.value for k in call.keywords if k.arg == "group"]
    return all(isinstance(value, ast.Constant) and value.value is None for value in given)


def _sets_init_variable(call: ast.Call) -> bool:
    """``os.environ.update(MASTER_PORT=...)``, ``.update({"MASTER_PORT": ...})``, ``.setdefault/pop("MASTER_PORT")``."""
    callee = call.func
    if not (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Attribute)
            and callee.value.attr == "environ" and callee.attr in ("update", "setdefault", "pop", "__setitem__")):
        return False
    keys: List[Any] = [k.arg for k in call.keywords]
    for arg in call.args[:1]:
        if isinstance(arg, ast.Dict):
            keys += [k.value for k in arg.keys if isinstance(k, ast.Constant)]
        elif isinstance(arg, ast.Constant):
            keys.append(arg.value)
    return any(key in _INIT_VARIABLES for key in keys)


def _init_variable(target: ast.AST) -> bool:
    """Whether ``target`` is ``os.environ["<a variable the rendezvous reads>"]``."""
    if not isinstance(target, ast.Subscript):
        return False
    holder = target.value
    if not (isinstance(holder, ast.Attribute) and holder.attr == "environ"):
        return False
    key = target.slice
    return isinstance(key, ast.Constant) and key.value in _INIT_VARIABLES
