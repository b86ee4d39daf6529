"""The lab as a package (tools/lab, tools/pyproject.toml), read with `ast` without importing
it: no import cycles between its modules (function-level imports count too), no module reaching
into another's private names, and the package metadata's version is the project's. No root, no
build needed."""
from __future__ import annotations

import ast
import pathlib
import re
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB = REPO / "tools" / "lab"


def lab_modules() -> dict[str, pathlib.Path]:
    return {p.stem: p for p in sorted(LAB.glob("*.py")) if p.stem != "__init__"}


def imports_of(tree: ast.AST, modules: set[str]) -> list[tuple[str, list[str], int]]:
    """(imported lab module, names taken from it, line) for every import anywhere in `tree`:
    `import lab.x`, `from lab import x`, `from lab.x import a, b`, and `import x` / `from x
    import a` of a sibling (the rank scripts run with tools/lab on sys.path)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name.removeprefix("lab.")
                if name in modules:
                    out.append((name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "lab":
                out += [(a.name, [], node.lineno) for a in node.names if a.name in modules]
            else:
                name = node.module.removeprefix("lab.")
                if name in modules and (node.module.startswith("lab.") or name == node.module):
                    out.append((name, [a.name for a in node.names], node.lineno))
    return out


def import_graph() -> dict[str, set[str]]:
    modules = lab_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = {m for m, _, _ in imports_of(tree, set(modules)) if m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_lab_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 30 and "allreduce_runs" in graph["compare"]
    found = cycles(graph)
    assert not found, f"import cycles in tools/lab: {found}"


def test_no_module_uses_another_modules_private_names():
    modules = lab_modules()
    problems = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bound = {}  # local name -> lab module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "lab":
                bound.update({a.asname or a.name: a.name for a in node.names})
            elif isinstance(node, ast.Import):
                bound.update({a.asname: a.name.removeprefix("lab.") for a in node.names
                              if a.asname and a.name.startswith("lab.")})
        for module, names, line in imports_of(tree, set(modules)):
            problems += [f"{name}.py:{line}: from {module} import {n}" for n in names
                         if n.startswith("_") and module != name]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and bound.get(node.value.id) in modules and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                problems.append(f"{name}.py:{node.lineno}: {node.value.id}.{node.attr}")
    assert not problems, "private names used across modules:\n" + "\n".join(problems)


def test_package_metadata_names_the_projects_version_and_python():
    meta = tomllib.loads((REPO / "tools" / "pyproject.toml").read_text(encoding="utf-8"))
    project = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'",
                        (REPO / "meson.build").read_text(encoding="utf-8"), re.S)
    assert project, "no version in meson.build's project()"
    assert meta["project"]["version"] == project.group(1)
    assert meta["project"]["requires-python"] == ">=3.11"
    assert meta["project"]["dependencies"] == []
    assert meta["tool"]["mypy"]["files"] == ["$MYPY_CONFIG_FILE_DIR/lab"]
