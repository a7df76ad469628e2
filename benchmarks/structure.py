"""The package's shape, measured (issue 26): modules by size, classes over 150 lines and
functions over 60, the import circles between modules, and the imports that climb from a floor
of the house to a higher one (`FLOORS`). Every `import` counts, at any level of a module: a
function-level import is still a dependency. tests/test_structure.py holds those two at 0.
Last, the functions that pass `Any` between packages (issue 68's debt, to bring down).

    python benchmarks/structure.py
"""

from __future__ import annotations

import ast
import gc
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "aichor_iac"
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 500, 150, 60

# The floors of the house, from the ground up; a module imports its own floor or lower ones.
# A name is a module or a package (all of its modules).
FLOORS: tuple[tuple[str, ...], ...] = (
    # how every floor reports; the API server's rules for objects; the programs that run in
    # the user's pods (which import nothing of ours)
    ("problems", "rules", "pods"),
    ("experiment", "settings"),  # the neutral experiment and the stack's settings
    ("reading", "registry", "frameworks", "sweeps"),  # reading below the doors (and what an
    # image runs, from its registry); plans; sweeps (spaces, algorithms, samplers, stopping,
    # trial names, results)
    ("doors", "planning"),  # front doors; an experiment's plan, gang and restart policy
    (
        "k8s",
        "observe",
        "records",
        "check",
    ),  # Kubernetes objects: made, a sweep's results, read back from a cluster (or from a
    # run's record), checked there
    # thin Pulumi components; the secrets they make; a sweep's order and gates
    ("components", "credentials", "sweep_order"),
    ("engine", "review", "convert", "submit", "local"),  # run, review
    ("cli", "dashboard", ""),  # the command line, its web page, and the package's own API
)


def parsed(path: Path) -> ast.Module:
    """The module's syntax tree, parsed with the garbage collector off: CPython 3.11.7 fails a
    parse that a collection interrupts with Python code of its own ("AST constructor recursion
    depth mismatch"), as a test's leftover objects' finalizers did once in the suite."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        if enabled:
            gc.enable()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules `path` imports (relative imports resolved; a package's
    `__init__` only where a name is taken from it)."""
    name, found = module_name(path), set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            stem = ".".join([*base, node.module] if node.module else base)
            named = [f"{stem}.{alias.name}" for alias in node.names]
            # `from . import x` imports the module x; `from .m import f`, the module m
            targets = named if all(n in modules for n in named) else [stem]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def floor(module: str) -> int:
    """The floor of a module of the package (the longest name of FLOORS that holds it)."""
    relative = module.removeprefix("aichor_iac").removeprefix(".")
    best = max(
        (
            name
            for names in FLOORS
            for name in names
            if name == "" or relative == name or relative.startswith(name + ".")
        ),
        key=len,
    )
    return next(i for i, names in enumerate(FLOORS) if best in names)


def climbs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import from a module to one on a higher floor."""
    return sorted((m, o) for m, others in graph.items() for o in others if floor(o) > floor(m))


def long_definitions(path: Path) -> list[tuple[str, str, int]]:
    """(kind, name, lines) of each class over MAX_CLASS and function over MAX_FUNCTION lines."""
    found = []
    for node in ast.walk(parsed(path)):
        size = (getattr(node, "end_lineno", 0) or 0) - getattr(node, "lineno", 0) + 1
        if isinstance(node, ast.ClassDef) and size > MAX_CLASS:
            found.append(("class", node.name, size))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and size > MAX_FUNCTION:
            found.append(("function", node.name, size))
    return found


def largest_class(paths: list[Path]) -> tuple[int, str]:
    """(lines, module:Class) of the longest class of the package."""
    return max(
        (node.end_lineno - node.lineno + 1, f"{module_name(path)}:{node.name}")  # type: ignore[operator]
        for path in paths
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ClassDef)
    )


def passed_through(manifest: Path) -> list[str]:
    """The package's modules a manifest passes through from its file to its objects: those a
    fresh interpreter has imported once `render` has run."""
    program = (
        "import sys, aichor_iac; aichor_iac.render(sys.argv[1]); "
        "print('\\n'.join(m for m in sys.modules if m.startswith('aichor_iac')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", program, str(manifest)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return sorted(found.stdout.split())


def loose_signatures(paths: list[Path], modules: set[str]) -> list[tuple[str, str]]:
    """The public functions whose signature says `Any` that a module of another package
    calls (`from m import f`, or `m.f`): where layers pass untyped values (issue 68)."""
    loose = set()
    for path in paths:
        for node in parsed(path).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                returns = ast.unparse(node.returns) if node.returns else ""
                if "Any" in ast.unparse(node.args) + returns:
                    loose.add((module_name(path), node.name))
    found = set()
    for path in paths:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        named: dict[str, str] = {}  # a local name -> the module or function it is
        tree = parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join([*base, node.module] if node.module else base)
                named |= {a.asname or a.name: f"{stem}.{a.name}" for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = named.get(node.value.id)
                if target in modules and (target, node.attr) in loose:
                    found.add((target, node.attr, name))
        for target in named.values():
            module, _, function = target.rpartition(".")
            if (module, function) in loose:
                found.add((module, function, name))
    return sorted({(m, f) for m, f, user in found if _package_of(m) != _package_of(user)})


def _package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def summary(paths: list[Path], graph: dict[str, set[str]]) -> str:
    """The shape in one paragraph: packages, root modules, floors, imports, the largest."""
    packages = [p for p in paths if p.name == "__init__.py" and p.parent != PACKAGE]
    root = [p for p in paths if p.parent == PACKAGE]
    size, largest = max((len(p.read_text().splitlines()), module_name(p)) for p in paths)
    lines, cls = largest_class(paths)
    trainjob = passed_through(ROOT / "examples" / "trainjob.yaml")
    return (
        f"{len(packages)} packages, {len(root)} modules in the root, {len(FLOORS)} floors, "
        f"{sum(map(len, graph.values()))} imports between modules\n"
        f"largest module {largest} ({size} lines), largest class {cls} ({lines} lines)\n"
        f"a TrainJob passes through {len(trainjob)} modules from file to objects"
    )


def main() -> int:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports(p, modules) for p in paths}
    sizes = sorted(((len(p.read_text().splitlines()), module_name(p)) for p in paths), reverse=True)
    total = sum(size for size, _ in sizes)
    print(f"{len(paths)} modules, {total:,} lines")
    print(summary(paths, graph) + "\n")
    for size, name in sizes:
        mark = "  over" if size > MAX_MODULE else ""
        print(f"{size:6,}  {name}{mark}")
    print(f"\nclasses over {MAX_CLASS} lines, functions over {MAX_FUNCTION}:")
    for path in paths:
        for kind, name, size in long_definitions(path):
            print(f"  {module_name(path)}: {kind} {name} ({size} lines)")
    found = circles(graph)
    print(f"\nimport circles: {len(found)}")
    for group in found:
        print("  " + " <-> ".join(group))
    upward = climbs(graph)
    print(f"imports that climb a floor: {len(upward)}")
    for module, other in upward:
        print(f"  {module} -> {other}")
    loose = loose_signatures(paths, modules)
    print(f"functions with `Any` in their signature that another package calls: {len(loose)}")
    for module, function in loose:
        print(f"  {module}.{function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
