"""The package's layout: every module imports on its own, the import graph has no cycle (lazy
imports inside functions included), and no module outside tests/ reaches for another module's
private names."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ppl_sbl"


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name, path):
    """(line, imported module, imported names) of every import statement in the file, at any depth."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield node.lineno, base, [alias.name for alias in node.names]


def _edges(name, path):
    """The modules of the package that ``name`` imports: ``from X import y`` names the module X.y
    where y is a module, else X."""
    for _, base, names in _imports(name, path):
        targets = [f"{base}.{n}" if f"{base}.{n}" in MODULES else base for n in names] or [base]
        for target in targets:
            while target and target not in MODULES:  # ``import ppl_sbl.models.rvm`` -> that module
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def test_the_import_graph_has_no_cycle():
    graph = {name: set(_edges(name, path)) for name, path in MODULES.items()}
    # a package's __init__ re-exports its submodules; a submodule importing its own package's
    # __init__ would close a circle through it, so the __init__ edges count like any other
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_private_names_of_another():
    found = []
    files = [p for p in ROOT.glob("**/*.py") if not {"tests", ".venv", "build"} & set(p.relative_to(ROOT).parts)]
    for path in files:
        name = _module_name(path) if PACKAGE in path.parents else path.stem
        tree = ast.parse(path.read_text())
        aliases = {}
        for line, base, names in _imports(name, path):
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{line}: from {base} import {n}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    aliases[alias.asname or alias.name] = True
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    aliases[alias.asname or alias.name.split(".")[0]] = True
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_every_module_imports_on_its_own(tmp_path):
    """Each module imported into an interpreter holding no module of the package (one process;
    the package's modules removed from ``sys.modules`` before each). Every import runs each
    module's code again; its compiled bytecode is written once, under ``tmp_path`` (not next to
    the sources), and read back by the later imports, also where PYTHONDONTWRITEBYTECODE is set."""
    script = (
        "import sys, importlib, jax, numpyro\n"
        f"sys.dont_write_bytecode = False\nsys.pycache_prefix = {str(tmp_path / 'pycache')!r}\n"
        f"names = {sorted(MODULES)!r}\n"
        "bad = []\n"
        "for name in names:\n"
        "    for m in [m for m in sys.modules if m == 'ppl_sbl' or m.startswith('ppl_sbl.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        bad.append(f'{name}: {type(err).__name__}: {err}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items()))
def test_no_library_file_over_700_lines(name):
    lines = MODULES[name].read_text().count("\n")
    assert lines <= 700, f"{MODULES[name].relative_to(ROOT)} has {lines} lines; split it by what each part holds."
