"""Layers that only look down: a package of hyperhive imports only packages of the layers below its own.

Every `import` and `from ... import` of every module counts, wherever it stands (a lazy import inside a
function, one under TYPE_CHECKING): each is a dependency all the same. Two packages of one layer may not
import each other either, so no cycle between packages can form. The unit is the package (`tasks`, ...) or
the module right under `hyperhive/` (`store`, ...); inside a package, modules import as they need.

When this fails, the import it names belongs lower (move the shared code below both packages, as
`control/` and `mcp_tool.py` were moved out of the service and `bash_mcp/`), or the layers below are wrong.
A new package must be placed in `LAYERS` before it is used.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "python" / "src" / "hyperhive"

# Lowest first. A unit may import units of earlier layers only.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        # The package's root (its version), the error hierarchy, JSON and numbers from outside, text from outside made
        # safe to show, the MCP tool shapes, the worker thread: imported by everything, importing nothing of ours.
        {"hyperhive", "errors", "jsontext", "numbers", "visible", "mcp_tool", "worker"},
        # The HIVE_MCP_SERVERS file; the state directory's layout and modes; sub-agent profiles (HIVE_SUBAGENTS);
        # agents' names and message ids in the hive.
        {"mcp_servers", "statedir", "subagent_profiles", "addresses"},
        {"roster"},  # the hive's roster (HIVE_HIVE): who is in it, who may write to whom
        {"config", "store", "control"},  # the environment, the database, the control socket's wire and lock
        {"procs"},  # every child process
        {"tasks"},  # the task engine and the bash tools
        {"runtime"},  # how a turn is driven
        {"core"},  # the agent itself: its turn loop, its inbox, its sub-agents
        {"hive", "notifications"},  # agents messaging each other (docs/hive.md); the operator's notifications
        {"service", "bash_mcp", "demo_agent"},  # the programs: the service, the bash servers, the demo agent
        {"cli"},
        {"__main__"},
    )
)


def layer_of(unit: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if unit in layer), None)


def unit_of(module: str) -> str:
    """`hyperhive.tasks.engine` → `tasks`; `hyperhive` → `hyperhive`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imported(module: str, is_package: bool, source: str, root: Path) -> list[tuple[int, str, str]]:
    """(line, the statement as written, the hyperhive module it reaches) for each import of ours."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from hyperhive import jsontext` reaches the module jsontext, not the package's root.
            targets = [
                f"{base}.{alias.name}" if _is_module(root, f"{base}.{alias.name}") else base for alias in node.names
            ]
        else:
            continue
        statement = " ".join((ast.get_source_segment(source, node) or "").split())
        statement = statement if len(statement) <= 100 else statement[:99] + "…"
        found += [(node.lineno, statement, t) for t in dict.fromkeys(targets) if t.split(".")[0] == "hyperhive"]
    return found


def _is_module(root: Path, dotted: str) -> bool:
    path = root.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(root: Path) -> list[str]:
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        is_package = rel.name == "__init__"
        module = ".".join(rel.parts[:-1] if is_package else rel.parts)
        unit = unit_of(module)
        here = layer_of(unit)
        if here is None:
            problems.append(f"{path.relative_to(root.parent)}: `{unit}` is in no layer; place it in LAYERS")
            continue
        seen: set[tuple[int, str]] = set()
        for line, statement, target in imported(module, is_package, path.read_text(), root):
            other = unit_of(target)
            if other == unit or (line, other) in seen:
                continue
            seen.add((line, other))
            there = layer_of(other)
            if there is None or there >= here:
                why = (
                    "is in no layer"
                    if there is None
                    else "is in the same layer (a cycle waiting to happen)"
                    if there == here
                    else f"is above it (layer {there} > {here})"
                )
                problems.append(
                    f"{path.relative_to(root.parent)}:{line}: `{statement}`: {unit} imports {other}, which {why}"
                )
    return problems


def test_no_package_imports_one_of_its_own_layer_or_above() -> None:
    problems = violations(SOURCE)
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


def test_the_guard_sees_an_upward_a_sideways_and_a_relative_import(tmp_path: Path) -> None:
    """The guard can fail: each kind of bad edge in a small fake tree is named with its file and line."""
    root = tmp_path / "hyperhive"
    for package in ("tasks", "service", "bash_mcp"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "errors.py").write_text("")
    (root / "tasks" / "engine.py").write_text(
        "from hyperhive.errors import x\n\ndef f():\n    import hyperhive.service.loop\n"
    )
    (root / "service" / "loop.py").write_text("from ..bash_mcp import server\nfrom . import prompt\n")
    (root / "bash_mcp" / "server.py").write_text("from hyperhive import errors, tasks\n")
    assert violations(root) == [
        "hyperhive/service/loop.py:1: `from ..bash_mcp import server`: service imports bash_mcp, which is in the"
        " same layer (a cycle waiting to happen)",
        "hyperhive/tasks/engine.py:4: `import hyperhive.service.loop`: tasks imports service, which is above it"
        f" (layer {layer_of('service')} > {layer_of('tasks')})",
    ]
