"""The package's layout by process role: imports go only where docs/design.rst allows, with no cycle.

Every import of every module counts, at module level and inside functions, read
from the source (the AST), so an import that only runs on some path is checked
too.  So are the lazily imported public names of ``continuous_test/__init__.py``.
No module may find another through ``sys.modules`` or ``importlib`` with a name
of this package, except the template's declared preload list.
"""
from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import helpers
import pytest
from helpers import ROOT

PACKAGE = ROOT / "continuous_test"

# The top level: what users import, subclass, run or catch (the private leaves are below).
API = {"__init__", "case", "multiprocess", "functions", "runner", "pytest_plugin", "migrate", "lint", "ddp",
       "report_html"}
# Modules anyone may import: they import nothing of the package beyond other leaves.
LEAVES = {"errors", "_procfs", "_role", "config", "sizes", "fresh_worlds", "_launch", "_assert_equal"}
# layer -> layers it may import (besides itself and the leaves).
ALLOWED = {
    "wire": set(),
    "rank": {"wire"},
    "verdict": {"wire"},
    "template": {"wire"},
    "controller": {"wire", "verdict", "template"},
    "session": {"wire", "verdict", "template", "controller"},
    "launched": {"wire", "rank", "verdict"},
    "torch_compat": {"api"},
    "api": {"wire", "rank", "verdict", "template", "controller", "session", "launched", "torch_compat"},
}
# What each leaf may import: nothing but other leaves and the wire format.
LEAF_ALLOWED = {
    "errors": set(),
    "_procfs": set(),
    "sizes": {"errors"},
    "fresh_worlds": {"errors", "sizes"},
    "_launch": {"errors", "wire.env"},
    "_assert_equal": set(),
    "_role": {"_launch", "wire.messages", "wire.outcome", "wire.env", "errors"},
    "config": {"errors", "sizes", "wire.env", "wire.messages", "wire.outcome"},
}
# The declared exceptions: (importer, imported) and why.
EXCEPTIONS = {
    ("controller.processes", "rank.main"),  # the rank process's target function
    ("template.preload_recorder", "rank.recorder"),  # preloaded: ranks start with the wrappers in place
    ("template.preload_migration", "migrate"),  # preloaded: ranks import a migrated module as the controller did
    ("template.server", "migrate"),  # whether the migration is in use decides the preload list
}
# Modules that run in every rank process (its module-level imports, transitively):
# none of them may bring the controller, the verdict or a launcher's code along.
RANK_ENTRY = "rank.main"
NOT_IN_RANKS = ("controller", "session", "verdict", "launched", "template")


def modules() -> Dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)
        found[name] = path
    return found


MODULES = modules()


def _target(node: ast.AST, name: str) -> List[str]:
    """Package modules an import node names (``continuous_test.x.y`` -> ``x.y``)."""
    found = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == "continuous_test":
                found.append("__init__")
            elif alias.name.startswith("continuous_test."):
                found.append(alias.name.split(".", 1)[1])
    elif isinstance(node, ast.ImportFrom) and node.module:
        if node.module == "continuous_test":
            for alias in node.names:
                found.append(alias.name if alias.name in MODULES else "__init__")
        elif node.module.startswith("continuous_test."):
            base = node.module.split(".", 1)[1]
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(sub if sub in MODULES else base)
    return found


@functools.lru_cache(maxsize=None)
def imports() -> Dict[str, Set[Tuple[str, bool]]]:
    """module -> {(imported module, at module level)}; read once, when a test first asks (not at collection)."""
    edges: Dict[str, Set[Tuple[str, bool]]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        found: Set[Tuple[str, bool]] = set()
        for node in ast.walk(tree):
            for target in _target(node, name):
                if target != name:
                    found.add((target, id(node) in top))
        if name == "__init__":  # the public names it imports lazily
            found |= {(m.split(".", 1)[1], False) for m in re.findall(r'"(continuous_test\.[\w.]+)"', path.read_text())}
        edges[name] = found
    return edges



def layer(module: str) -> str:
    if module in LEAVES:
        return "leaf"
    if module in API:
        return "api"
    return module.split(".")[0]


def test_every_module_has_a_layer():
    unknown = [m for m in MODULES if layer(m) not in ALLOWED and layer(m) != "leaf"]
    assert unknown == [], "give these modules a place in the layout (and in docs/design.rst)"


def test_imports_go_only_where_the_layout_allows():
    wrong = []
    for module, targets in imports().items():
        for target, _ in targets:
            if (module, target) in EXCEPTIONS or target == "__init__" and layer(module) != "leaf":
                continue
            if layer(module) == "leaf":
                ok = target in LEAF_ALLOWED[module] or target.split(".")[0] == "wire" and module == "config"
            else:
                ok = layer(target) in ALLOWED[layer(module)] | {layer(module), "leaf"}
            if not ok:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_wire_format_and_the_leaves_import_only_each_other():
    for module, targets in imports().items():
        if layer(module) == "wire":
            assert {t for t, _ in targets} <= {m for m in MODULES if m.startswith("wire.")} | {"errors"}, module


def test_there_is_no_import_cycle():
    graph = {m: {t for t, _ in targets} for m, targets in imports().items()}
    cycles = []
    state: Dict[str, int] = {}

    def visit(node: str, path: List[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    # The package root imports its submodules' names lazily (by string, on first use):
    # an edge into it is a name it re-exports, not a cycle at import time.
    assert [c for c in cycles if not c.startswith("__init__")] == []


def room(module: str) -> str:
    """A room: a subpackage (``controller``), or a top-level module (``case``)."""
    return module.split(".")[0]


def test_every_import_runs_down_between_rooms():
    # Rooms, like modules, form no loop: a room that imports another is above it.
    # Imports of the package root are its lazy public names, not an import between rooms.
    graph: Dict[str, Set[str]] = {}
    why: Dict[Tuple[str, str], str] = {}
    for module, targets in imports().items():
        for target, _ in targets:
            if target != "__init__" and room(module) != room(target):
                graph.setdefault(room(module), set()).add(room(target))
                why.setdefault((room(module), room(target)), f"{module} -> {target}")

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
        return False

    upward = sorted(why[(a, b)] for a in graph for b in graph[a] if reaches(b, a))
    assert upward == [], "these imports close a loop between rooms: move the module they need down"


def test_ranks_load_no_controller_code():
    seen, todo = set(), [RANK_ENTRY]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [t for t, top in imports().get(module, ()) if top and t != "__init__"]
    assert sorted(m for m in seen if m.startswith(NOT_IN_RANKS) and layer(m) != "leaf") == []


@pytest.mark.e2e
def test_a_rank_loads_no_controller_or_verdict_code(tmp_path):
    # Read from real ranks' sys.modules: under the fresh-interpreter template a rank holds only what ranks
    # import (a forked template, or one forked from the test suite's zygote, shares a controller's modules).
    env = {"CONTINUOUS_TEST_START_METHOD": "forkserver", "RANK_MODULES_DIR": str(tmp_path)}
    proc = helpers.run([sys.executable, "test_rank_modules.py"], env=env, fresh=True)
    loaded = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert proc.returncode == 0 and len(loaded) == 4, helpers.describe(proc)
    assert {rank: modules for rank, modules in loaded.items() if modules} == {}


def test_no_module_finds_another_by_name():
    pattern = re.compile(r"""(sys\.modules(\.get)?\s*[\[(]|import_module\()\s*f?["']continuous_test""")
    found = [f"{m}: {line.strip()}" for m, path in MODULES.items() for line in path.read_text().splitlines()
             if pattern.search(line)]
    assert found == []


def test_the_preload_list_names_modules_that_exist():
    text = (PACKAGE / "template" / "server.py").read_text()
    named = re.findall(r'"continuous_test\.([\w.]+)"', text)
    assert named and all(n in MODULES for n in named), named


# Exceptions that never leave the module that raises them.
INTERNAL_EXCEPTIONS = {
    "_assert_equal.py": {"Mismatch"},  # caught by TestCase.assertEqual, re-raised as a failure
    "controller/bisect.py": {"_Stop"},  # ends a replay; the note says why
}


def test_every_exception_a_user_may_see_is_in_errors():
    found = {}
    for path in MODULES.values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and any(
                    re.search(r"(Error|Exception|Warning)$", ast.unparse(base)) for base in node.bases):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), set()).add(node.name)
    elsewhere = {path: names - INTERNAL_EXCEPTIONS.get(path, set()) for path, names in found.items()
                 if path != "errors.py"}
    assert {path: names for path, names in elsewhere.items() if names} == {}


def test_exceptions_are_importable_from_the_package_and_from_where_they_were():
    import continuous_test
    from continuous_test import errors

    for name in errors.__all__:
        assert getattr(continuous_test, name) is getattr(errors, name), name
    from continuous_test.config import ConfigError

    assert ConfigError is errors.ConfigError


def test_a_broken_rule_is_caught(monkeypatch):
    # The check itself can fail: an import of the controller from the rank side is reported.
    monkeypatch.setitem(imports(), "rank.run", imports()["rank.run"] | {("controller.world", True)})
    with pytest.raises(AssertionError):
        test_imports_go_only_where_the_layout_allows()
    with pytest.raises(AssertionError):
        test_ranks_load_no_controller_code()
    # A leaf that imports a room whose modules import it closes a loop between rooms.
    monkeypatch.setitem(imports(), "_role", imports()["_role"] | {("launched.join", False)})
    with pytest.raises(AssertionError):
        test_every_import_runs_down_between_rooms()
    monkeypatch.setitem(imports(), "wire.env", imports()["wire.env"] | {("wire.messages", False)})
    monkeypatch.setitem(imports(), "wire.messages", imports()["wire.messages"] | {("wire.env", False)})
    with pytest.raises(AssertionError):
        test_there_is_no_import_cycle()


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
