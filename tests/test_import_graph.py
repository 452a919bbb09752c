"""The library's import graph has no cycle: no module of bert_jax/ imports, directly or through
other modules, a module that imports it back.

The graph is read from the source (`ast`), nothing is imported. Every `import bert_jax...` and
`from bert_jax... import ...` is an edge, wherever it is written: at module level, inside a
function (a deferred import of a module that imports us back is still a cycle, one that only
decides the import order at run time) and under `if TYPE_CHECKING:` (a type that each module
needs from the other says the two are one module, or that the type belongs in a third). Relative
imports are resolved against the importing module's package.

Modules are named as Python names them: `bert_jax/data/batches.py` is `bert_jax.data.batches`,
a package's `__init__.py` is the package. `from bert_jax.x import y` is an edge to the module
`bert_jax.x.y` when y is a submodule (a .py file or a package under bert_jax/x/), else to
`bert_jax.x` (y is a name defined there). An import's implicit parent packages are not edges.
Imports by computed name (`importlib.import_module(f"...{name}")`) cannot be read and are not
counted.

The same graph keeps the library in layers (docs/architecture.md, "Layout"): each top-level
folder of bert_jax/ has a layer (LAYERS), and an import goes to a folder of a lower layer or stays
within its own folder; folders of one layer (config/ and data/; convert/, train/ and embeddings/)
are peers that do not import each other. cli.py, the scripts' front door, imports runtime/ and
config/ only, and no library module imports it or a deprecated former path (DEPRECATED).
"""

import ast
import pathlib

import repo_root

ROOT = pathlib.Path(repo_root.ROOT)
PACKAGE = "bert_jax"

# Top-level folder (or module) of bert_jax -> its layer: imports go to a lower number, or within
# the folder. The package itself and the deprecated former paths re-export from below and sit on
# top; nothing in the library imports them.
LAYERS = {
    "bert_jax.runtime": 1,
    "bert_jax.config": 2,
    "bert_jax.data": 2,
    "bert_jax.model": 3,
    "bert_jax.convert": 4,
    "bert_jax.train": 4,
    "bert_jax.embeddings": 4,
    "bert_jax.recipes": 5,
    "bert_jax.tools": 6,
    "bert_jax.cli": 7,
    "bert_jax.sentence_embeddings": 7,
    "bert_jax.retrieval": 7,
    "bert_jax": 7,
}
CLI = "bert_jax.cli"
CLI_MAY_IMPORT = ("bert_jax.runtime", "bert_jax.config")
# Former module paths kept for users, each warning that it moved (tests/test_public_paths.py).
DEPRECATED = ("bert_jax.sentence_embeddings", "bert_jax.retrieval",
              "bert_jax.train.checkpointing")


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Module name -> source file, for every .py file under <root>/bert_jax."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` names (its relative dots resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The bert_jax modules that `module` (source at `path`) imports, anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            # `from bert_jax.x import y` imports the submodule bert_jax.x.y if there is one.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            # `import bert_jax.x.y.z` names a module; trim to the longest prefix that is one.
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.split(".")[0] == PACKAGE and name != module:
                targets.add(name)
    return targets


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module -> the bert_jax modules it imports, for every module of the library."""
    modules = module_files(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as [m0, m1, ..., m0] (each imports the next), or [] if it has none.

    Depth-first search, iterative so that no recursion limit bounds the chains it follows;
    modules and their imports are visited in sorted order, so a graph always reports the same
    cycle.
    """
    done, on_path = set(), {}
    for start in sorted(graph):
        if start in done:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        on_path[start] = 0
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path[-1])
                del on_path[path.pop()]
                stack.pop()
            elif nxt in on_path:
                return path[on_path[nxt]:] + [nxt]
            elif nxt not in done:
                on_path[nxt] = len(path)
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return []


def test_graph_has_the_edges_it_should():
    """Edges of each kind are found, so a graph read wrongly cannot pass as acyclic."""
    graph = import_graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100
    # `from bert_jax.train import steps`: the submodule, not the package.
    assert "bert_jax.train.steps" in graph["bert_jax.train.loop"]
    # A package's __init__.py is the package: `from bert_jax.model import BertModel, ...`.
    assert "bert_jax.model" in graph["bert_jax"]
    # Inside a function: `from bert_jax import model` (a package).
    assert "bert_jax.model" in graph["bert_jax.convert.hf"]
    # Under `if TYPE_CHECKING:`: `from bert_jax.data.tokenizers.subword import SubwordTokenizer`.
    assert "bert_jax.data.tokenizers.subword" in graph["bert_jax.convert.hf_export"]


def test_find_cycle_reports_a_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"b"}}) == []


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def folder(module: str) -> str:
    """The LAYERS entry `module` belongs to: its top-level folder (bert_jax.data for
    bert_jax.data.corpora.catalog), a top-level module, or the package itself."""
    if module == PACKAGE:
        return PACKAGE
    parts = module.split(".")
    return ".".join(parts[:2])


def layer_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges (importer, imported) that leave their folder without going to a lower layer."""
    return sorted((source, target) for source, targets in graph.items() for target in targets
                  if folder(source) != folder(target)
                  and LAYERS[folder(target)] >= LAYERS[folder(source)])


def _edge_lines(edges) -> str:
    return "\n".join(f"  {a} -> {b} (layer {LAYERS[folder(a)]} -> {LAYERS[folder(b)]})"
                      for a, b in edges)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if folder(m) not in LAYERS)
    assert not unplaced, "modules in no folder of LAYERS: " + ", ".join(unplaced)


def test_layer_edges_finds_upward_and_sideways_imports():
    graph = {"bert_jax.runtime.paths": {"bert_jax.data.textfiles"},  # up
             "bert_jax.train.loop": {"bert_jax.embeddings.metrics",  # sideways: peers
                                     "bert_jax.train.steps", "bert_jax.model"},
             "bert_jax.recipes.finetune.recipe": {"bert_jax.recipes.common"}}
    assert layer_edges(graph) == [("bert_jax.runtime.paths", "bert_jax.data.textfiles"),
                                  ("bert_jax.train.loop", "bert_jax.embeddings.metrics")]


def test_imports_go_down_the_layers():
    edges = layer_edges(import_graph())
    assert not edges, ("imports that leave their folder but not for a lower layer "
                       "(LAYERS):\n" + _edge_lines(edges))


def test_no_two_folders_import_each_other():
    graph = import_graph()
    arrows = {(folder(a), folder(b)) for a, targets in graph.items() for b in targets
              if folder(a) != folder(b)}
    both = sorted((a, b) for a, b in arrows if (b, a) in arrows and a < b)
    edges = [(a, b) for a, targets in sorted(graph.items()) for b in sorted(targets)
             if (folder(a), folder(b)) in {*both, *((b, a) for a, b in both)}]
    assert not both, "folders that import each other:\n" + _edge_lines(edges)


def test_no_two_packages_import_each_other():
    """The same at every depth: a package (the folder a module is in) and its subpackage too
    (recipes/ and recipes/finetune/ did: evaluation.py, above the recipes, now in tools/)."""
    files, graph = module_files(), import_graph()

    def package(module: str) -> str:
        return module if files[module].name == "__init__.py" else module.rsplit(".", 1)[0]

    arrows = {(package(a), package(b)) for a, targets in graph.items() for b in targets
              if package(a) != package(b)}
    both = sorted((a, b) for a, b in arrows if (b, a) in arrows and a < b)
    assert not both, "packages that import each other: " + ", ".join(
        f"{a} <-> {b}" for a, b in both)


def test_cli_imports_runtime_and_config_only():
    graph = import_graph()
    outside = sorted(t for t in graph[CLI] if folder(t) not in CLI_MAY_IMPORT)
    assert not outside, f"{CLI} imports " + ", ".join(outside) + f"; it may import {CLI_MAY_IMPORT}"


def test_the_library_imports_neither_cli_nor_a_deprecated_path():
    graph = import_graph()
    shims = set(DEPRECATED) | {PACKAGE}
    edges = sorted((a, b) for a, targets in graph.items() for b in targets
                   if a not in shims and (b == CLI or b in DEPRECATED))
    assert not edges, ("imports of cli.py or of a deprecated path (use the new one):\n"
                       + _edge_lines(edges))
