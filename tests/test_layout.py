"""House rules that a test can check (docs/design.md)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def family_name_pattern() -> re.Pattern:
    """The stems of every registered family's ``model_type`` and ``tiny:`` spec name (the
    leading letters: ``qwen2_5_vl`` -> ``qwen``, ``llava_onevision`` -> ``llava``), so a
    new family module extends the check without an edit here."""
    from vlcohort.processors.family import ADAPTERS, TINY_BUILDERS

    names = {*ADAPTERS, *TINY_BUILDERS}
    stems = {m.group(0) for n in names if (m := re.match(r"[a-z]{3,}", n.lower()))}
    return re.compile("|".join(sorted(map(re.escape, stems))), re.IGNORECASE)


def test_family_name_pattern_covers_the_registry():
    pattern = family_name_pattern()
    from vlcohort.processors.family import ADAPTERS, TINY_BUILDERS

    for name in (*ADAPTERS, *TINY_BUILDERS):
        assert pattern.search(name), name
    assert all(pattern.search(w) for w in ("Qwen2.5-VL", "InternVL3.5", "Gemma-3", "Llama"))


def test_no_family_names_in_the_core():
    """Rule 1: family knowledge lives in processors/ only."""
    FAMILY_NAMES = family_name_pattern()
    hits = []
    for path in sorted((ROOT / "vlcohort").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if FAMILY_NAMES.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "family names in vlcohort/ (move this to processors/):\n" + "\n".join(hits)


def test_processors_import_nothing_from_the_core_but_the_problem_record():
    """processors/ may use the plain Problem record, nothing else of vlcohort/."""
    bad = []
    paths = sorted((ROOT / "processors").rglob("*.py"))
    assert len(paths) > 10  # the family modules are there
    for path in paths:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*(from|import)\s+vlcohort(?!\.processors\b)(\.\w+)*", line)
            if m and not line.strip().startswith("from vlcohort.data.problems import"):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_no_trust_remote_code_true_hard_coded():
    hits = [str(p) for d in SHIPPED for p in (ROOT / d).rglob("*.py")
            if re.search(r"trust_remote_code\s*=\s*True", p.read_text())]
    assert not hits, hits


def test_docs_list_every_metric_and_method():
    """The tables stay true to the code: every documented metric key (docs/metrics.md) and
    every method (the README's methods table)."""
    from vlcohort.config_checks import method_sources
    from vlcohort.monitoring.metrics import METRIC_DOCS
    from vlcohort.training.reward_sources import registry

    registry()  # each source documents the keys it logs when it registers

    metrics = (ROOT / "docs" / "metrics.md").read_text()
    missing = [k for k in METRIC_DOCS if f"`{k}`" not in metrics]
    assert not missing, f"docs/metrics.md lacks: {missing}"
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{m}`" in readme for m in method_sources())


# ----------------------------------------------------------------------------- lint waivers

#: A noqa comment that names its rules and says why after them ("noqa: E402 - sys.path is set first").
NOQA_WITH_REASON = re.compile(r"#\s*noqa: [A-Z]+[0-9]+(?:, ?[A-Z]+[0-9]+)* +- +\S")


def _noqa_comments(path: Path) -> list[tuple[int, str]]:
    """The comments of ``path`` that are ``noqa`` directives (strings that mention noqa are not)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [(t.start[0], t.string) for t in tokens
            if t.type == tokenize.COMMENT and re.search(r"#\s*noqa\b", t.string, re.IGNORECASE)]


def test_every_noqa_names_its_rule_and_a_reason():
    """The shipped code, bench and tests waive a lint rule only by name and with a reason
    after the codes; tests/data holds test inputs, not code."""
    files = [p for d in (*SHIPPED, "bench", "tests") for p in (ROOT / d).rglob("*.py")
             if ROOT / "tests" / "data" not in p.parents]
    assert len(files) > 100
    bare = [f"{p.relative_to(ROOT)}:{n}: {c}" for p in files for n, c in _noqa_comments(p)
            if not NOQA_WITH_REASON.search(c)]
    assert not bare, "\n".join(bare)


def test_the_noqa_check_tells_a_reason_from_none(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('import os  # noqa: F401 - re-exported\nx = "# noqa"\nimport re  # noqa: F401\n'
                 "import sys  # noqa\nimport io  # noqa: E402, F401 -\n")
    found = _noqa_comments(f)
    assert [n for n, _ in found] == [1, 3, 4, 5]
    assert [bool(NOQA_WITH_REASON.search(c)) for _, c in found] == [True, False, False, False]


# ----------------------------------------------------------------------------- import graph

SHIPPED = ("vlcohort", "processors", "eval")
#: Top-level folders that install inside the vlcohort namespace (pyproject's package-dir).
MAPPED = {"processors": "vlcohort.processors", "eval": "vlcohort.eval"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[:1] = MAPPED.get(parts[0], parts[0]).split(".")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_wheel_lists_every_package_under_one_import_name():
    """Every folder with an ``__init__.py`` under the shipped folders is a package in
    pyproject's list, named inside ``vlcohort`` (no generic top-level import name such as
    ``eval`` or ``processors`` is installed), and the list names nothing else."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {_module_name(p) for d in SHIPPED for p in (ROOT / d).rglob("__init__.py")}
    assert set(tool["packages"]) == on_disk
    assert all(p == "vlcohort" or p.startswith("vlcohort.") for p in tool["packages"])
    assert tool["package-dir"] == {v: k for k, v in MAPPED.items()}


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` (imports for annotations only)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, at module level, inside functions and classes, and
    inside ``if TYPE_CHECKING:`` blocks: an import for annotations only still ties the two
    modules (a type checker, a reader, a later runtime use), so it counts as any other."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported shipped module: line of the first such import}.

    ``import a.b`` and ``from a.b import x`` point at ``a.b`` (or at ``a.b.x`` when ``x``
    is a submodule); relative imports are resolved against the importing module's package.
    """
    files = {_module_name(p): p for d in SHIPPED for p in sorted((ROOT / d).rglob("*.py"))}
    packages = {m for m, p in files.items() if p.name == "__init__.py"}

    def known(name: str) -> str | None:  # the longest prefix of ``name`` that is a module
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in files:
                return ".".join(parts[:n])
        return None

    graph: dict[str, dict[str, int]] = {}
    for mod, path in files.items():
        edges = graph.setdefault(mod, {})
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            else:
                if node.level:
                    package = mod if mod in packages else mod.rpartition(".")[0]
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else known(source)
                           for a in node.names]
            for t in targets:
                if t is not None and t != mod:
                    edges.setdefault(t, node.lineno)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """(one cycle a, b, ..., a; all the modules of its group) for each strongly connected
    group of modules: every module of a group reaches every other one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for group in groups:  # the shortest way back to the group's first module
        start = min(group)
        paths = {start: [start]}
        frontier = [start]
        while frontier and start not in [w for v in frontier for w in graph[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in group and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in graph[v])
        cycles.append((paths[last] + [start], sorted(group)))
    return cycles


def test_import_graph_helpers_see_every_kind_of_import(tmp_path):
    """Function-level, relative and ``if TYPE_CHECKING:`` imports count, and ``from pkg
    import submodule`` points at the submodule."""
    graph = import_graph()
    assert "vlcohort.rollout.hf" in graph["vlcohort.rollout.engines"]  # inside make_engine
    assert "vlcohort.config_schema" in graph["vlcohort.config_checks"]  # annotations only
    assert "vlcohort.rollout.base" in graph["vlcohort.training.rewards"]  # annotations only
    assert "vlcohort.processors.base" in graph["vlcohort.processors"]  # from .base import ...
    assert "vlcohort.training.grpo" in graph["vlcohort.config_checks"]  # from pkg import grpo
    assert import_cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}}) == \
        [(["a", "b", "c", "a"], ["a", "b", "c"])]


def test_no_import_cycles():
    """Imports point one way (docs/design.md): no module of vlcohort/, processors/ or eval/
    imports, directly or through others, a module that imports it back."""
    graph = import_graph()
    cycles = import_cycles(graph)

    def show(cycle: list[str], group: list[str]) -> str:
        steps = [f"{a} imports {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
        return (" -> ".join(cycle) + "\n    " + "\n    ".join(steps)
                + (f"\n    (the circle's group: {', '.join(group)})" if len(group) > 2 else ""))

    assert not cycles, "import cycles:\n" + "\n".join(show(*c) for c in cycles)


#: The layers of docs/design.md, lowest first: a module imports only its own layer and
#: the ones below (module name prefixes; the longest prefix names a module's layer).
LAYERS = (
    ("vlcohort.errors", "vlcohort.typed_yaml", "vlcohort.bounded_json", "vlcohort.seeds",
     "vlcohort.console", "vlcohort.runlock", "vlcohort.run_folder"),
    ("vlcohort.processors", "vlcohort.answers", "vlcohort.code"),
    ("vlcohort.data", "vlcohort.config_schema"),
    ("vlcohort.rollout", "vlcohort.monitoring"),
    ("vlcohort.training", "vlcohort.config_checks"),
    ("vlcohort.config",),
    ("vlcohort.recipes", "vlcohort.eval", "vlcohort.analysis", "vlcohort.export",
     "vlcohort.plan", "vlcohort.run_header", "vlcohort.preflight", "vlcohort.docs_pages"),
    ("vlcohort.cli", "vlcohort.__main__"),
)
#: Upward imports the design names: the processors read the plain Problem record.
UPWARD_ALLOWED = {("vlcohort.processors.base", "vlcohort.data.problems")}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s longest matching prefix."""
    best = max(((len(p), k) for k, layer in enumerate(LAYERS) for p in layer
                if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module}: in no layer of LAYERS; add it where it belongs"
    return best[1]


def test_nothing_imports_upward():
    """docs/design.md: imports point one way, down the layers (a module below never
    imports one above, even for annotations)."""
    graph = import_graph()
    upward = [f"{a} imports {b} (line {line})" for a, edges in sorted(graph.items())
              if a != "vlcohort"
              for b, line in sorted(edges.items())
              if b != "vlcohort" and layer_of(b) > layer_of(a) and (a, b) not in UPWARD_ALLOWED]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_config_vocabularies_are_the_registries():
    """Each vocabulary is written once, where its implementations are registered; the
    config checks read it from there (``CHOICES``), so a new variant needs one edit."""
    from vlcohort.answers import extract, grading, voting
    from vlcohort.config_checks import CHOICES, method_sources
    from vlcohort.data import problems
    from vlcohort.rollout import engines
    from vlcohort.training import grpo, rewards

    assert CHOICES["grpo.adv_scale"] == tuple(grpo.ADVANTAGE_SCALES)
    assert CHOICES["grpo.kl_kind"] == tuple(grpo.KL_ESTIMATORS)
    assert CHOICES["grpo.policy_loss"] == tuple(grpo.POLICY_LOSSES)
    assert CHOICES["grpo.loss_agg"] == tuple(grpo.AGGREGATIONS)
    assert CHOICES["grpo.is_level"] == tuple(grpo.IS_LEVELS)
    assert CHOICES["grpo.is_mode"] == (*grpo.IS_MODES, "off")
    assert CHOICES["rollout.engine"] is engines.ENGINES
    assert CHOICES["reward.tie"] is voting.TIE_RULES
    assert set(CHOICES["reward.topology"]) == set(voting.TOPOLOGIES) - {"self"}
    assert CHOICES["reward.grader"] == tuple(grading.GRADERS)
    assert CHOICES["reward.answer_style"] is extract.STYLES
    assert CHOICES["data.preset"] == tuple(problems.PRESETS)
    from vlcohort.training import reward_sources

    sources = tuple(reward_sources.registry())
    assert CHOICES["reward.source"] == CHOICES["agents.*.reward_source"] == sources
    assert set(method_sources().values()) == set(sources)  # every method presets a real source
    # what each answer kind's records carry is written once, in the data layer below both
    assert set(rewards.ANSWER_KIND) == set(problems.ANSWER_KIND_NEEDS)
