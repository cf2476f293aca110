"""Imports run downhill and in no circle: data -> model -> encoders / store -> probes / analysis -> plots -> experiments.

The commands sit above the library they drive: ``dstg_interp/cli/`` (one module per command, the shell, the
shared flags) may import anything of the library, probes included, and nothing in the library imports it,
argparse or a ``__main__`` block; only the scripts of ``experiments/`` (which use the command shell) reach
into it from outside, and the console entry (``dstg_interp/cli/entry.py``) and the command table
(``dstg_interp/cli/__init__.py``) live inside it.  ``benchmarks/`` are scripts above everything: they may
import any of it, and nothing imports them.  (They import their siblings as top-level modules, ``from
machine import ...``, which the graph does not see as edges.)

Nothing is imported here: every module of dstg_interp/, probes/, experiments/ and benchmarks/ is parsed with ``ast``.

The graph.  A module's edges are its module-level imports (outside any function or class body; those under
a module-level ``if`` or ``try`` count), relative imports resolved against the module's package.
``from pkg import name`` is an edge to the submodule ``pkg.name`` where that is a module, else to ``pkg``
itself, i.e. to its ``__init__``, whose namespace the name is read from.

Packages and their submodules.  Importing ``pkg.sub`` puts ``pkg`` in ``sys.modules`` before ``sub`` runs,
but ``sub`` reads nothing from it, so that implicit parent import is not an edge: a package whose
``__init__`` re-exports its submodules (``dstg_interp/store/__init__.py`` imports ``.extract``) is not in a
circle with them.  The ``__init__`` -> own submodule edges themselves are kept, not ignored: the package
cannot finish without them.  The one case that then forms a circle is a submodule reading a name through
its own package (``from dstg_interp.data import load_corpus`` inside ``dstg_interp/data/``, whose
``__init__`` imports that submodule): it works or fails with the order of the ``__init__``'s lines, so it
is reported; import the name from the module that defines it instead.  (Ignoring every ``__init__`` ->
submodule edge would hide exactly that case.)

The layers are checked on every import, inside functions too: an upward import is upward wherever it is
written.  And no module imports one of ours inside a function: that is how the old circles hid
(``corpora`` <-> ``en_mix``, ``model.base`` <-> ``checkpoint``).  Inside a function only a truly optional
or heavy third-party import stays (``datasets`` for ``hf:`` corpora, ``torch`` in ``flags``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("dstg_interp", "probes", "experiments", "benchmarks")

# The command room (its console entry and command table included): above the whole library.
COMMANDS = ("dstg_interp.cli",)
SCRIPTS = ("experiments", "benchmarks")  # command lines of their own, above the library

# (importer prefix, imported prefixes it must not reach); an importer within COMMANDS is exempt from the
# rules about dstg_interp (the commands drive probes/ too)
FORBIDDEN = [
    ("dstg_interp", ("probes", "experiments", "benchmarks", "dstg_interp.cli")),
    ("probes", ("dstg_interp.cli", "benchmarks")),
    ("experiments", ("benchmarks",)),
    ("dstg_interp.data", ("dstg_interp.model", "dstg_interp.encoders", "dstg_interp.store", "dstg_interp.analysis",
                          "dstg_interp.plots")),
    ("dstg_interp.model", ("dstg_interp.encoders", "dstg_interp.store", "dstg_interp.analysis", "dstg_interp.plots")),
    ("dstg_interp.encoders", ("dstg_interp.store", "dstg_interp.analysis", "dstg_interp.plots")),
    ("dstg_interp.store", ("dstg_interp.analysis", "dstg_interp.plots")),
    ("dstg_interp.analysis", ("dstg_interp.plots",)),
    ("probes", ("experiments",)),
]


def module_files(root: Path = REPO) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package __init__)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def imports(module: str, modules: dict) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function or class) for every import statement of ``module``."""
    path, is_package = modules[module]
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []

    def resolve(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]

    def walk(node, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((target, child.lineno, nested) for target in resolve(child))
            walk(child, nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))

    walk(ast.parse(path.read_text(), str(path)), False)
    return found


def ours(name: str) -> bool:
    return any(within(name, package) for package in PACKAGES)


def import_graph(modules: dict) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports at module level."""
    return {module: {target for target, _, nested in imports(module, modules) if not nested and target in modules}
            for module in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing itself), Tarjan."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(modules: dict) -> list[str]:
    """'module:line imports target' for every import that breaks a FORBIDDEN rule."""
    bad = []
    for module in modules:
        for target, line, _ in imports(module, modules):
            for importer, banned in FORBIDDEN:
                if importer == "dstg_interp" and any(within(module, room) for room in COMMANDS):
                    banned = tuple(prefix for prefix in banned if prefix in SCRIPTS)
                if within(module, importer) and any(within(target, prefix) for prefix in banned):
                    bad.append(f"{module}:{line} imports {target}")
    return bad


def test_the_graph_sees_the_modules():
    modules = module_files()
    graph = import_graph(modules)
    assert {"dstg_interp.data.catalog", "dstg_interp.analysis.spectra", "dstg_interp.cli.probe", "experiments.run_all"} \
        <= set(modules)
    assert "dstg_interp.data.en_mix" in graph["dstg_interp.data.catalog"]  # absolute, resolved to the submodule
    assert "dstg_interp.encoders" in graph["dstg_interp.analysis.heads"]  # relative (..encoders), to the package
    assert "dstg_interp.store.extract" in graph["dstg_interp.store"]  # a package __init__ -> its submodule


def test_no_import_circles():
    found = cycles(import_graph(module_files()))
    assert not found, "import circles (each line: modules that import each other in a circle, at module level):\n" + \
        "\n".join(" <-> ".join(component) for component in found)


def test_imports_run_downhill():
    bad = upward_imports(module_files())
    assert not bad, "imports against the data path (data -> model -> encoders/store -> probes/analysis -> plots " \
                    "-> experiments):\n" + "\n".join(bad)


def test_none_of_ours_is_imported_inside_a_function():
    modules = module_files()
    # benchmarks/ exempt: bench_store and bench_checksums import the library inside the function they time,
    # so a child process's memory and start-up are measured with the imports it really makes
    bad = [f"{module}:{line} imports {target}"
           for module in modules if not within(module, "benchmarks")
           for target, line, nested in imports(module, modules) if nested and ours(target)]
    assert not bad, "imports of our modules inside functions (move them to the top of the module):\n" + "\n".join(bad)


def command_line_code(modules: dict) -> list[str]:
    """'module: what' for every library module (outside COMMANDS) with argparse or a ``__main__`` block."""
    bad = []
    for module, (path, _) in modules.items():
        if any(within(module, room) for room in COMMANDS + SCRIPTS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        if any(target == "argparse" for target, _, _ in imports(module, modules)):
            bad.append(f"{module}: imports argparse (a library function takes a config, never a Namespace)")
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                bad.append(f"{module}:{node.lineno} has a __main__ block (commands live in dstg_interp/cli/)")
    return bad


def test_commands_live_in_the_cli_room_only():
    bad = command_line_code(module_files())
    assert not bad, "command-line code in the library:\n" + "\n".join(bad)


def test_the_checks_can_fail(tmp_path):
    """The same checks on a copy of the sources with a circle, an upward import and an import in a function."""
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(REPO)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())
    corpora = tmp_path / "dstg_interp" / "data" / "corpora.py"
    corpora.write_text(corpora.read_text() + "\nfrom dstg_interp.data.en_mix import load_en_mix\n")
    heads = tmp_path / "dstg_interp" / "analysis" / "heads.py"
    heads.write_text(heads.read_text() + "\nfrom ..plots.recipe import plot_recipe_curves\n\n\n"  # (plots.heads reads heads' rule)
                                         "def later():\n    from probes.ridge import RidgeProbe\n")
    positions = tmp_path / "probes" / "positions.py"
    positions.write_text(positions.read_text() + "\nimport argparse\nfrom dstg_interp.cli import flags\n\n"
                                                 "if __name__ == '__main__':\n    pass\n")
    splits = tmp_path / "probes" / "splits.py"
    splits.write_text(splits.read_text() + "\nfrom benchmarks.machine import LoadWatch\n")  # nothing imports a benchmark
    modules = module_files(tmp_path)
    assert "probes.splits:" in " ".join(upward_imports(modules)) and "imports benchmarks.machine" in upward_imports(modules)[-1]
    splits.write_text((REPO / "probes" / "splits.py").read_text())
    modules = module_files(tmp_path)
    assert cycles(import_graph(modules)) == [["dstg_interp.data.corpora", "dstg_interp.data.en_mix"]]
    bad = upward_imports(modules)
    assert [line.split(":")[0] for line in bad] == ["dstg_interp.analysis.heads"] * 2 + ["probes.positions"]
    assert bad[0].endswith("imports dstg_interp.plots.recipe") and bad[1].endswith("imports probes.ridge")
    assert bad[2].endswith("imports dstg_interp.cli.flags")
    assert [line.split(":")[0] for line in command_line_code(modules)] == ["probes.positions"] * 2
    assert imports("dstg_interp.analysis.heads", modules)[-1][::2] == ("probes.ridge", True)
