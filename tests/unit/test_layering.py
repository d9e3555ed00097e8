"""The layering holds: checked, not only described (docs/architecture.md, "Layers").

Two checks:

* importing ``stoker.store``, ``manager``, ``server``, ``cli`` (and the Spark-free shared
  modules) in a fresh interpreter loads no pyspark module at all;
* an AST scan of every module under ``stoker/`` finds no import (top-level or inside a function;
  ``if TYPE_CHECKING:`` blocks excepted, they never run) of a layer the table does not allow.

The command line may reach the runtime only inside a function of ``stoker/cli/run.py`` (the
local path of ``stoker run``): everything else in ``cli`` stays Spark-free.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

PACKAGE = REPO / "stoker"

# Shared leaf modules every layer may use.
LEAVES = frozenset(
    {
        "errors",
        "types",
        "clock",
        "settings",
        "redact",
        "restart",
        "scalespec",
        "logformat",
        "leases",
        "durations",
        "version",
        "driverargs",
        "errortext",
    }
)

# Component -> the components it may import (besides itself and the leaves).
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "types": frozenset(),
    "clock": frozenset(),
    # Whether a lease lapsed, on an observer's monotonic clock: manager and runtime alike.
    "leases": frozenset(),
    "settings": frozenset(),
    # Durations and partition counts: one grammar for settings, flags, fields and events.
    "durations": frozenset(),
    # What a job manager hands the processes it starts (argv and environment): both sides.
    "driverargs": frozenset(),
    "paths": frozenset(),
    # stoker's version: the store records it (issue 39 item 5) without the package root.
    "version": frozenset(),
    "redact": frozenset(),
    # An error's text cut to the user's exception and line: the CLI and the web UI.
    "errortext": frozenset(),
    # How every process logs (text or JSON lines, with the job, attempt and epoch bound).
    "logformat": frozenset(),
    "testing": frozenset(),
    "control": frozenset(),
    # Restart strategies: pure decisions, shared by the job manager and an application's driver.
    "restart": frozenset(),
    # The scaling spec: parsed alike by the CLI, the server, the manager, the scaler, drivers.
    "scalespec": frozenset(),
    # Spark's checkpoint folder, read and trimmed without Spark: runtime, manager and sources.
    "checkpoint_layout": frozenset(),
    # The manager's token file: made by the service, read by the CLI.
    "tokens": frozenset({"procs"}),
    "store": frozenset({"control"}),
    # Savepoint lineage over the stores (which job each savepoint went on in): checked by the
    # runtime's restore and by a job manager's submission, so Spark-free.
    "lineage": frozenset({"store", "checkpoint_layout"}),
    "procs": frozenset({"store"}),
    "client": frozenset(),
    "manager": frozenset({"store", "procs", "paths", "control", "checkpoint_layout", "lineage"}),
    # The scaler acts through the job manager's clusters and the store.
    "scaling": frozenset({"manager", "store", "procs", "paths", "control"}),
    "server": frozenset({"manager", "store", "procs", "paths", "control"}),
    # The manager process composed (API + supervisor + scaler): only the CLI starts it.
    "service": frozenset({"server", "manager", "scaling", "store", "tokens"}),
    "cli": frozenset(
        {"server", "service", "manager", "store", "client", "procs", "paths", "control", "tokens"}
    ),
    # Sources and sinks sit between the runtime and the store (a source may check its fence);
    # their Spark tasks have fault points too.
    "sinks": frozenset({"store", "procs", "testing"}),
    "sources": frozenset({"store", "procs", "testing", "checkpoint_layout"}),
    "pipeline": frozenset({"sinks", "sources", "control"}),
    "runtime": frozenset(
        {
            "store",
            "sinks",
            "sources",
            "pipeline",
            "procs",
            "paths",
            "testing",
            "control",
            "checkpoint_layout",
            "lineage",
        }
    ),
}

# (module, component) imports allowed only inside a function: the CLI's local run.
LAZY_ONLY = {("stoker.cli.run", "runtime")}

# The packages that must never load pyspark, not even through the package root.
SPARK_FREE = [
    "store",
    "manager",
    "server",
    "cli",
    "client",
    "procs",
    "paths",
    "scaling",
    "scalespec",
    "service",
    "checkpoint_layout",
    "lineage",
    "tokens",
]


def _module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _component(module: str) -> str | None:
    """``stoker.manager.supervisor`` -> ``manager``; None for the package root itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(imported stoker module, line, inside a function) for every import that runs."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for stmt in node.orelse:
                visit(stmt, in_function)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "stoker":  # from stoker import sinks: the submodule, if it is one
                found.extend((f"stoker.{a.name}", node.lineno, in_function) for a in node.names)
            else:
                found.append((target, node.lineno, in_function))
        nested = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, nested)

    visit(ast.parse(path.read_text(), str(path)), False)
    return [f for f in found if f[0] == "stoker" or f[0].startswith("stoker.")]


def layering_violations(package: Path = PACKAGE) -> list[str]:
    """Every import of a layer its importer may not use, as ``file:line: a -> b (why)``."""
    bad: list[str] = []
    known = {p.stem if p.is_file() else p.name for p in package.iterdir()}
    for path in sorted(package.rglob("*.py")):
        module = _module_name(path, package)
        comp = _component(module)
        if comp is None:  # the package root is the facade: it may name anything (lazily)
            continue
        if comp not in ALLOWED:
            rel = path.relative_to(package.parent)
            bad.append(f"{rel}: component {comp!r} is not in the layering table (add it)")
            continue
        for target, line, in_function in _imports(path, module):
            dep = _component(target)
            label = dep if dep in known else target
            where = f"{path.relative_to(package.parent)}:{line}: {comp} -> {label}"
            if dep is None or dep not in known:
                # the root re-exports the runtime: a layer importing it imports Spark
                bad.append(f"{where} (import a submodule, not the package root)")
            elif dep == comp or dep in LEAVES or dep in ALLOWED[comp]:
                continue
            elif (module, dep) in LAZY_ONLY:
                if not in_function:
                    bad.append(f"{where} (allowed only inside a function)")
            else:
                bad.append(f"{where} (a {comp} module may not import {dep})")
    return bad


def test_no_layer_imports_a_layer_above_it() -> None:
    bad = layering_violations()
    assert not bad, "layering broken:\n" + "\n".join(bad)


def test_only_the_command_line_starts_the_manager_process() -> None:
    assert sorted(c for c, deps in ALLOWED.items() if "service" in deps) == ["cli"]
    assert "scaling" not in ALLOWED["server"]  # the API is composed with the scaler outside


def test_the_scan_sees_function_local_and_relative_imports(tmp_path: Path) -> None:
    # A tiny tree with one violation of each kind the scan must catch.
    pkg = tmp_path / "stoker"
    (pkg / "store").mkdir(parents=True)
    (pkg / "manager").mkdir()
    (pkg / "cli").mkdir()
    (pkg / "runtime").mkdir()
    (pkg / "__init__.py").write_text("")
    for d in ("store", "manager", "cli", "runtime"):
        (pkg / d / "__init__.py").write_text("")
    (pkg / "store" / "a.py").write_text("def f():\n    from stoker.manager import x\n")
    (pkg / "manager" / "b.py").write_text("from ..runtime import attempt\n")
    (pkg / "cli" / "run.py").write_text("from stoker.runtime import launch\n")
    (pkg / "cli" / "jobs.py").write_text("from stoker import run\n")
    (pkg / "runtime" / "ok.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stoker.cli import main\n"
    )
    bad = "\n".join(layering_violations(pkg))
    assert "store/a.py:2: store -> manager" in bad
    assert "manager/b.py:1: manager -> runtime" in bad
    assert "cli/run.py:1: cli -> runtime (allowed only inside a function)" in bad
    assert "cli/jobs.py:1: cli -> stoker.run (import a submodule" in bad
    assert "runtime/ok.py" not in bad


@pytest.mark.parametrize("name", SPARK_FREE)
def test_importing_a_spark_free_layer_loads_no_pyspark(name: str) -> None:
    code = (
        f"import stoker.{name}, sys\n"
        "spark = sorted(m for m in sys.modules if m.startswith('pyspark'))\n"
        "assert not spark, spark[:5]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"import stoker.{name} loaded pyspark:\n{proc.stderr}"
