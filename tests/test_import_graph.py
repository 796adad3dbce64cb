"""The import graph of guitrainer/, computed from the source: no cycle between modules (imports inside functions
count: a lazy import only hides a cycle), and no module takes a ``_private`` name from another package.

``_private`` means private to the package (DESIGN.md §1): a name another package needs is public in its own.
Imports under ``if TYPE_CHECKING:`` are left out, as in the import contracts: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "guitrainer"


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def imports_of(root: Path) -> dict[str, list[tuple[str, str, int]]]:
    """``module -> [(imported module, imported name or "", line)]`` for every guitrainer import in ``root``."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    out: dict[str, list[tuple[str, str, int]]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        found: list[tuple[str, str, int]] = []
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                found += [(a.name, "", node.lineno) for a in node.names if a.name.startswith("guitrainer")]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("guitrainer"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    found.append((sub, "", node.lineno) if sub in modules else (node.module, a.name, node.lineno))
        out[name] = found
    return out


def graph_of(root: Path) -> dict[str, set[str]]:
    """Edges between modules: to the module an import names (a package's ``__init__`` for names taken from it)."""
    imports = imports_of(root)
    modules = set(imports)
    graph: dict[str, set[str]] = {}
    for module, found in imports.items():
        targets = set()
        for target, _, _ in found:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _package_of(module: str, root: Path) -> str:
    """The package a module belongs to: itself for a package's ``__init__``, else its parent."""
    is_package = (root.parent / module.replace(".", "/") / "__init__.py").exists()
    return module if is_package else module.rpartition(".")[0]


def private_borrowings(root: Path) -> list[str]:
    """``module:line takes _name from other.module`` for each private name imported across packages."""
    out = []
    for module, found in imports_of(root).items():
        for target, name, line in found:
            taken = name or target.rpartition(".")[2]
            if taken.startswith("_") and not taken.startswith("__") and _package_of(target, root) != _package_of(module, root):
                out.append(f"{module}:{line} takes {taken} from {target}")
    return out


def test_no_import_cycle_between_modules():
    found = cycles(graph_of(PACKAGE))
    assert found == [], "import cycles (lazy imports included): " + "; ".join(" <-> ".join(c) for c in found)


def test_no_private_name_is_taken_from_another_package():
    assert private_borrowings(PACKAGE) == []


def test_the_checks_find_a_cycle_and_a_borrowed_private_name(tmp_path):
    """Both checks can fail: a lazy import closing a loop, and ``_helper`` taken across packages, are found."""
    pkg = tmp_path / "guitrainer"
    for folder in ("a", "b"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from guitrainer.b.two import value\n\ndef _helper():\n    return 1\n")
    (pkg / "b" / "two.py").write_text(
        "value = 1\n\ndef later():\n    from guitrainer.a import one  # lazy, still a cycle\n    return one\n"
    )
    (pkg / "b" / "three.py").write_text("from guitrainer.a.one import _helper\n")
    assert cycles(graph_of(pkg)) == [["guitrainer.a.one", "guitrainer.b.two"]]
    assert private_borrowings(pkg) == ["guitrainer.b.three:1 takes _helper from guitrainer.a.one"]
