"""The import layering: no cycle anywhere in dlas; and on the TVM side dlas.tir below
dlas.algorithms below dlas.compiler.

`dlas.tir` (ConvSpec, conv annotations, schedule helpers) imports neither layer above it;
`dlas.algorithms` never imports `dlas.compiler`; and no module of the three imports
itself back through others (the compiler's CPU and GPU paths once did: build <->
gpu_schedule). The static check reads every import statement, lazy ones in functions
included, because a cycle hidden in a function body is still a cycle in the design.
The stages and executors import no option module: they reach options through the point.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dlas.tir", "dlas.algorithms", "dlas.compiler")
#: Which packages each one may import (layers below it, and itself).
ALLOWED = {
    "dlas.tir": {"dlas.tir"},
    "dlas.algorithms": {"dlas.tir", "dlas.algorithms"},
    "dlas.compiler": {"dlas.tir", "dlas.algorithms", "dlas.compiler"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in (ROOT / package.replace(".", "/")).rglob("*.py"):
            out[_module_name(path)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The dlas modules `name` imports anywhere in its source (absolute names)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import submodule` imports the submodule too
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)
    return {m for m in found if m == "dlas" or m.startswith("dlas.")}


def _graph(packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = _modules(packages)
    known = set(modules)
    return {name: _imports(name, path, known) & known - {name}
            for name, path in modules.items()}


def _package(module: str) -> str:
    return next(p for p in PACKAGES if module == p or module.startswith(p + "."))


def test_layers_import_only_downwards() -> None:
    wrong = [
        f"{mod} imports {dep}"
        for mod, deps in _graph().items()
        for dep in sorted(deps)
        if _package(dep) not in ALLOWED[_package(mod)]
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    """Across the whole of dlas: a cycle makes two modules one idea in two files, and the
    smallest change to either can make the package fail to import."""
    graph = _graph(("dlas",))
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


#: The house's layers (docs/architecture.md): each top-level package or module of dlas
#: may import only those on a lower level (and itself). Sideways and upward imports are
#: what turned into the cycles this layering replaced.
LEVELS = {
    "dlas._compat": -1,  # third-party workarounds: below all, the root package imports it
    "dlas": 0, "dlas.tir": 0, "dlas.contracts": 0, "dlas.integrity": 0,
    "dlas.resources": 0,
    "dlas.user_cache": 0,
    "dlas.fast_exit": 0,  # the console script's and helpers' exit: the standard library only
    "dlas.registry": 1,
    "dlas.sweep": 2, "dlas.targets": 2, "dlas.datasets": 2,
    "dlas.models": 3, "dlas.algorithms": 3,
    "dlas.compiler": 4, "dlas.compression": 4,
    "dlas.measure": 5,
    "dlas.results": 6, "dlas.tuning": 6,
    "dlas.profile": 7, "dlas.stages": 7,
    "dlas.runner": 8,
    "dlas.estimate": 9, "dlas.report": 9,
    "dlas.predict": 10, "dlas.cli_args": 10,
    "dlas.cli": 11,
}


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_packages_import_only_lower_levels() -> None:
    graph = _graph(("dlas",))
    assert {_top(m) for m in graph} <= set(LEVELS), \
        f"a new top-level package needs a level: {sorted({_top(m) for m in graph} - set(LEVELS))}"
    wrong = sorted(
        f"{mod} (level {LEVELS[_top(mod)]}) imports {dep} (level {LEVELS[_top(dep)]})"
        for mod, deps in graph.items() for dep in deps
        if _top(dep) != _top(mod) and LEVELS[_top(dep)] >= LEVELS[_top(mod)])
    assert not wrong, "\n".join(wrong)


def test_build_and_gpu_schedule_share_the_pipeline_module() -> None:
    graph = _graph()
    assert "dlas.compiler.build" not in graph["dlas.compiler.gpu_schedule"]
    assert "dlas.compiler.pipeline" in graph["dlas.compiler.gpu_schedule"]
    assert "dlas.compiler.pipeline" in graph["dlas.compiler.build"]


@pytest.mark.parametrize(("imported", "absent"), [
    ("dlas.tir.conv_spec, dlas.tir.schedule_helpers", ("dlas.algorithms", "dlas.compiler")),
    ("dlas.algorithms.options, dlas.algorithms.direct, dlas.algorithms.gemm, "
     "dlas.algorithms.spatial_pack, dlas.algorithms.schedule_util", ("dlas.compiler",)),
    # `dlas --help` and `dlas results` start in half a second: no TVM (5 s), no torch
    ("dlas.cli", ("tvm", "torch", "dlas.measure.vm_timing")),
])
def test_runtime_imports(imported: str, absent: tuple[str, ...]) -> None:
    """What a fresh interpreter actually loads (a package __init__ could pull a layer in)."""
    code = (f"import sys, {imported}\n"
            f"print(sorted(m for m in sys.modules if m.startswith({absent!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


#: Where each layer's options are registered: the stages and executors reach options
#: only through the sweep point (`choice.option.fn`), never by importing one.
OPTION_MODULES = ("dlas.datasets.options", "dlas.datasets.cifar10", "dlas.datasets.imagenet",
                  "dlas.datasets.digits",
                  "dlas.models.options", "dlas.models.imagenet", "dlas.models.cifar",
                  "dlas.compression.options", "dlas.compression.quantization",
                  "dlas.algorithms.options", "dlas.tuning.options",
                  "dlas.tuning.metaschedule.options", "dlas.tuning.baselines.options",
                  "dlas.targets.options")


def test_stages_and_executors_import_no_option() -> None:
    paths = {_module_name(p): p for package in ("dlas/stages", "dlas/runner")
             for p in (ROOT / package).rglob("*.py")}
    known = set(paths) | set(OPTION_MODULES)
    offenders = {name: sorted(_imports(name, path, known) & set(OPTION_MODULES))
                 for name, path in paths.items()}
    assert not {k: v for k, v in offenders.items() if v}
