"""The tests' own layout: no test module imports another test module.

What several test modules share (constants, helper functions, fixtures) lives in
``tests/helpers/<concept>.py`` or in a ``conftest.py``. A test module imported by another
is collected twice under two names, drags its fixtures (autouse ones included) into the
importer, and makes deleting or renaming a test file break unrelated files.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

#: Calls that load a module by name or by file (importlib, runpy, imp).
LOADERS = {"import_module", "spec_from_file_location", "SourceFileLoader", "run_path", "run_module",
           "load_source", "__import__"}


def python_files(root: Path) -> list[Path]:
    """Every Python file under ``root`` (the test data excepted: it is input, not tests)."""
    return sorted(p for p in root.rglob("*.py") if "data" not in p.relative_to(root).parts)


def is_test_module(path: Path) -> bool:
    return path.suffix == ".py" and path.name.startswith("test_")


def module_file(root: Path, dotted: str) -> Path | None:
    """The file under ``root``'s parent that ``dotted`` (``tests.processors.test_x``) names."""
    parts = dotted.split(".")
    if not parts or parts[0] != root.name or not all(parts):
        return None
    path = root.parent.joinpath(*parts).with_suffix(".py")
    return path if path.is_file() else None


def imported_test_modules(path: Path, root: Path = TESTS) -> list[tuple[int, str]]:
    """(line, what) for each test module that ``path`` imports or loads: ``from .test_x``,
    ``from . import test_x``, ``from tests.test_x``, ``import tests.processors.test_x``,
    a bare ``import test_x`` of a sibling, and ``importlib`` / ``runpy`` loading a test
    file by name or path, at any depth (inside functions too)."""
    package = [root.name, *path.parent.relative_to(root).parts]
    found = []

    def check(line: int, dotted: str) -> None:
        target = module_file(root, dotted)
        if target is None and "." not in dotted:  # a sibling on sys.path (rootdir / prepend mode)
            target = path.parent / f"{dotted}.py"
            target = target if target.is_file() else None
        if target is not None and is_test_module(target) and target != path:
            found.append((line, dotted))

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            check(node.lineno, module)
            for alias in node.names:
                check(node.lineno, f"{module}.{alias.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in LOADERS:
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                for const in ast.walk(arg):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str):
                        text = const.value
                        stem = Path(text).stem if text.endswith(".py") else text.rsplit(".", 1)[-1]
                        if stem.startswith("test_") and stem != path.stem:
                            found.append((node.lineno, text))
    return found


def test_no_test_module_imports_another_test_module():
    """Test modules, conftest files and tests/helpers/ alike: a shared helper belongs in
    tests/helpers/<concept>.py (plain functions and constants) or a conftest.py (fixtures)."""
    paths = python_files(TESTS)
    assert sum(is_test_module(p) for p in paths) > 50  # the test modules are there
    bad = [f"{p.relative_to(ROOT)}:{line}: {what}"
           for p in paths for line, what in imported_test_modules(p)]
    assert not bad, ("test modules imported by other files (move what they share into "
                     "tests/helpers/<concept>.py or a conftest.py):\n" + "\n".join(bad))


def test_the_check_sees_every_kind_of_test_module_import(tmp_path):
    root = tmp_path / "tests"
    (root / "helpers").mkdir(parents=True)
    (root / "sub").mkdir()
    for name in ("test_a.py", "sub/test_b.py", "helpers/__init__.py", "helpers/things.py", "conftest.py"):
        (root / name).write_text("X = 1\n")
    sources = {
        "from .test_a import X\n": "tests.test_a",
        "from . import test_a\n": "tests.test_a",
        "from tests.test_a import X\n": "tests.test_a",
        "from tests.sub.test_b import X\n": "tests.sub.test_b",
        "from tests.sub import test_b\n": "tests.sub.test_b",
        "import tests.sub.test_b as b\n": "tests.sub.test_b",
        "import test_a\n": "test_a",
        "def f():\n    from tests.test_a import X\n": "tests.test_a",
        "import importlib\nimportlib.import_module('tests.test_a')\n": "tests.test_a",
        ("import importlib.util\nfrom pathlib import Path\n"
         "importlib.util.spec_from_file_location('t', Path(__file__).with_name('test_a.py'))\n"): "test_a.py",
    }
    for source, what in sources.items():
        importer = root / "test_importer.py"
        importer.write_text(source)
        assert [w for _, w in imported_test_modules(importer, root)] == [what], source
    # from a subfolder, relative imports climb from there
    nested = root / "sub" / "test_nested.py"
    nested.write_text("from .test_b import X\nfrom ..test_a import X\n")
    assert [w for _, w in imported_test_modules(nested, root)] == ["tests.sub.test_b", "tests.test_a"]
    # helpers, conftest, a helper function named test_*, and the module itself are fine
    fine = root / "test_fine.py"
    fine.write_text("from tests.helpers.things import X\nfrom tests.helpers import things\n"
                    "from tests.helpers.things import test_like\nfrom .conftest import X\n"
                    "from .helpers.things import X\nimport json\nfrom pathlib import Path\n"
                    "Path(__file__).with_name('test_fine.py')\n")
    assert imported_test_modules(fine, root) == []
