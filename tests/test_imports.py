"""The `ptofa` package has no import cycle, and its imports only go down its layers.

The import graph has one node per module of the package (every `ptofa/**/*.py`; a
package is its `__init__.py`) and an edge A -> B when importing A, or calling a
function of A, imports B. It is read from the source with `ast`, not by importing anything.

`import_graph(root)` has the module-level imports only: the import statements that run
when the module is imported, i.e. those in the module body, also when nested in a
top-level `if`, `try`, `with` or class body. `import_graph(root, functions=True)` adds the
imports inside functions (they run when the function is called: a circle through them is
a circle all the same, only deferred). Imports under `if TYPE_CHECKING:` never run: they
are no edge of either graph, but the layer rule (`LAYERS`) holds for them too, since a
type taken from a higher layer is a dependency on it (`import_graph(root, type_checking=True)`).

Edges of one import statement:
  * `import a.b.c` and `from a.b import c` (when `a/b/c` is a module) -> `a.b.c`;
    `from a.b import name` (a name defined in `a.b`) -> `a.b`. Relative imports are
    resolved against the importing module.
  * Importing `a.b.c` also runs the `__init__` of its packages `a.b` (and `a`): edges
    to those packages, except the packages of the importer itself, which are already
    being imported when the importer runs (a submodule importing a sibling is fine).
    Taking a name from one of them (`from a.b import name` in `a/b/x.py`) is an edge
    all the same: the name must be defined before `a/b/__init__.py` imports `x`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ptofa

PACKAGE_ROOT = Path(ptofa.__file__).resolve().parent


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at `root`."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(tree: ast.Module, functions: bool = False,
                         type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported (see the module docstring); with
    `functions` also those in function bodies, with `type_checking` also those under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.append(stmt)
            elif isinstance(stmt, ast.If):
                if type_checking or not _is_type_checking(stmt.test):
                    visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                    visit(block)
            elif isinstance(stmt, (ast.With, ast.ClassDef)):
                visit(stmt.body)
            elif functions and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(stmt.body)
            elif functions and isinstance(stmt, (ast.For, ast.While, ast.AsyncFor, ast.AsyncWith)):
                visit(stmt.body)
                visit(getattr(stmt, "orelse", []))

    visit(tree.body)
    return found


def _packages_of(module: str, is_package: bool) -> set[str]:
    """The packages that are (being) imported while `module` runs: its parents, and itself if a package."""
    parts = module.split(".")
    parents = {".".join(parts[:i]) for i in range(1, len(parts))}
    return parents | {module} if is_package else parents


def import_graph(root: Path, functions: bool = False, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level (see the module docstring; with
    `functions` also inside functions, with `type_checking` also under TYPE_CHECKING)."""
    files = module_files(root)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        package = module if is_package else module.rpartition(".")[0]
        targets: set[str] = set()  # modules the statements name
        names_from: set[str] = set()  # packages a `from P import name` takes a name (not a submodule) from
        for stmt in module_level_imports(ast.parse(path.read_text(), str(path)), functions, type_checking):
            if isinstance(stmt, ast.Import):
                targets.update(alias.name for alias in stmt.names)
                continue
            if stmt.level:
                base = package.split(".")[: len(package.split(".")) - (stmt.level - 1)]
                source = ".".join(base + ([stmt.module] if stmt.module else []))
            else:
                source = stmt.module or ""
            for alias in stmt.names:
                submodule = f"{source}.{alias.name}"
                if submodule in files:
                    targets.add(submodule)
                else:
                    targets.add(source)
                    names_from.add(source)
        edges: set[str] = set()
        already_running = _packages_of(module, is_package)
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the target and the packages it lives in
                name = ".".join(parts[:i])
                if name in files and name not in already_running and name != module:
                    edges.add(name)
        # A name taken from a package that is still running its __init__ must already be defined there.
        edges.update(p for p in names_from if p in files and p != module)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a -> ... -> a) per strongly connected component that has one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
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
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_in(graph, set(component)) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first search back to it)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parent:
                    parent[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


# Floors of the package, bottom first: a module may import its own floor and the ones below.
# The root `ptofa/__init__` is lazy (it imports nothing itself), so any module may import it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ir",),
    ("api",),
    ("modlist", "pipeline", "visibility", "kernels", "fa_builder", "reference", "optable"),
    ("sim",),
    ("launch",),
    ("attention",),
    ("runner", "cli"),
)
MAX_ROOT_MODULES = 12
MAX_FLOORS = 11
MAX_LINES = 850


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    """The floor of a module by its first name below the package (-1: the package root)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    for floor, names in enumerate(layers):
        if parts[1] in names:
            return floor
    raise AssertionError(f"{module}: its subpackage {parts[1]!r} has no floor in LAYERS; add it there")


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Every edge that imports a higher floor (or that the lazy root makes), as one line each."""
    names = [" / ".join(floor) for floor in layers]
    wrong = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers)
        for target in sorted(targets):
            there = layer_of(target, layers)
            if here == -1 or there > here:
                where = "the package root" if here == -1 else names[here]
                wrong.append(f"{module} (floor {here}: {where}) imports {target} (floor {there}: "
                             f"{names[there] if there >= 0 else 'root'})")
    return wrong


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest import chain (modules, importer first) of an acyclic graph."""
    best: dict[str, list[str]] = {}

    def chain(module: str) -> list[str]:
        if module not in best:
            below = [chain(target) for target in sorted(graph.get(module, ()))]
            best[module] = [module, *max(below, key=len, default=[])]
        return best[module]

    return max((chain(module) for module in sorted(graph)), key=len, default=[])


def test_ptofa_has_no_import_cycle() -> None:
    """Neither at module level nor through the imports inside functions."""
    for functions in (False, True):
        graph = import_graph(PACKAGE_ROOT, functions=functions)
        assert "ptofa.runner" in graph and "ptofa.sim.executor" in graph
        cycles = find_cycles(graph)
        kind = "module-level and function-level" if functions else "module-level"
        assert not cycles, f"{kind} import cycles in ptofa:\n" + "\n".join("  " + " -> ".join(c) for c in cycles)


def test_imports_only_go_down() -> None:
    """Every import, in a function or under TYPE_CHECKING too, takes from its own floor or below."""
    wrong = upward_imports(import_graph(PACKAGE_ROOT, functions=True, type_checking=True))
    assert not wrong, "imports against the floors of ptofa (LAYERS, bottom first):\n  " + "\n  ".join(wrong)


def test_at_most_12_modules_in_the_package_root() -> None:
    root_modules = sorted(p.name for p in PACKAGE_ROOT.glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, f"{len(root_modules)} modules in ptofa/: {root_modules}"


def test_the_floors_are_few() -> None:
    """Counted over the floors' units (a root module, or a subpackage as one node), the longest chain is short."""
    graph = import_graph(PACKAGE_ROOT, functions=True)
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        unit = ".".join(module.split(".")[:2])
        units.setdefault(unit, set()).update(".".join(t.split(".")[:2]) for t in targets)
        units[unit].discard(unit)
    chain = longest_chain(units)
    assert len(chain) <= len(LAYERS), f"a chain of {len(chain)} packages: {' -> '.join(chain)}"


def test_import_chains_are_at_most_11_modules_long() -> None:
    chain = longest_chain(import_graph(PACKAGE_ROOT, functions=True))
    assert len(chain) <= MAX_FLOORS, f"an import chain of {len(chain)} modules: {' -> '.join(chain)}"


def test_no_module_is_over_850_lines() -> None:
    long = {str(p.relative_to(PACKAGE_ROOT)): n for p in PACKAGE_ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_backends_sit_above_the_backend_interface() -> None:
    """The former circle: npu and runner both import ptofa.launch.base; npu does not import runner."""
    graph = import_graph(PACKAGE_ROOT, functions=True)
    assert "ptofa.launch.base" in graph["ptofa.launch.npu"] and "ptofa.launch.base" in graph["ptofa.runner"]
    assert "ptofa.runner" not in graph["ptofa.launch.npu"]
    assert not graph["ptofa.launch.base"] & {"ptofa.runner", "ptofa.launch.npu", "ptofa.launch.sim"}


def test_layer_rules_on_a_small_package(tmp_path: Path) -> None:
    """Function-level imports are edges of the full graph (a circle through one is found); an import
    of a higher floor is reported, also inside a function or under TYPE_CHECKING; the longest chain."""
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from pkg.high import b\n",  # upward, in a function
        "low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high.b import B\n",
        "low/d.py": "import pkg.low.c\n",
        "high/__init__.py": "",
        "high/b.py": "from pkg.low import a\nB = 1\n",
        "high/e.py": "import pkg.low.d\nimport pkg\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    layers = (("low",), ("high",))
    assert import_graph(pkg)["pkg.low.a"] == set()
    full = import_graph(pkg, functions=True)
    assert full["pkg.low.a"] == {"pkg.high", "pkg.high.b"} and full["pkg.low.c"] == set()
    assert find_cycles(full) == [["pkg.high.b", "pkg.low.a", "pkg.high.b"]]
    assert upward_imports(import_graph(pkg), layers) == []
    typed = upward_imports(import_graph(pkg, functions=True, type_checking=True), layers)
    assert typed == ["pkg.low.a (floor 0: low) imports pkg.high (floor 1: high)",
                     "pkg.low.a (floor 0: low) imports pkg.high.b (floor 1: high)",
                     "pkg.low.c (floor 0: low) imports pkg.high (floor 1: high)",
                     "pkg.low.c (floor 0: low) imports pkg.high.b (floor 1: high)"]
    assert longest_chain(import_graph(pkg)) == ["pkg.high.e", "pkg.low.d", "pkg.low.c"]


def test_cycle_finder_on_a_small_package(tmp_path: Path) -> None:
    """Module-level imports (also relative, in try/if/class bodies) are edges; function-level
    and TYPE_CHECKING imports are not; a package's submodules may import each other through it."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "try:\n    from . import c\nexcept ImportError:\n    pass\n",
        "c.py": "class C:\n    from pkg.a import x\n",  # a -> b -> c -> a
        "d.py": "def f():\n    import pkg.e\n",  # function level: no edge
        "e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\nimport pkg.d\n",
        "sub/__init__.py": "from pkg.sub.x import X\n",
        "sub/x.py": "from pkg.sub import y\nX = 1\n",  # sibling through the package: fine
        "sub/y.py": "",
        "sub/z.py": "from pkg.sub import X\n",  # a name from the package it is in: an edge
        "f.py": "import pkg.sub.y\n",  # also runs pkg/sub/__init__
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(pkg)
    assert graph["pkg.d"] == set()
    assert graph["pkg.e"] == {"pkg.d"}
    assert graph["pkg.sub.x"] == {"pkg.sub.y"}
    assert graph["pkg.sub.z"] == {"pkg.sub"}
    assert graph["pkg.f"] == {"pkg.sub", "pkg.sub.y"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    (pkg / "d.py").write_text("import pkg.e\n")  # now d <-> e
    assert find_cycles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"], ["pkg.d", "pkg.e", "pkg.d"]]
