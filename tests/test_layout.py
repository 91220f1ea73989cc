"""The package's layout rules that code review would otherwise have to remember: library code in src/ never
imports an entry-point module at the top level (dataset.py, export.py, run_*.py, pretrain_eval.py), and every task
is defined once, in src/tasks.py, for every entry point that needs one; every requirement has a floor."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOT_MODULES = {path.stem for path in ROOT.glob("*.py")}


def imported_modules(path: Path) -> set:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_nothing_in_src_imports_a_top_level_module():
    assert {"dataset", "export", "run_classifier", "pretrain_eval"} <= ROOT_MODULES
    offenders = {str(path.relative_to(ROOT)): sorted(imported_modules(path) & ROOT_MODULES)
                 for path in sorted((ROOT / "src").rglob("*.py"))}
    assert {name: modules for name, modules in offenders.items() if modules} == {}


def test_the_entry_points_take_their_tasks_from_the_registry():
    from src.tasks import TASKS

    assert sorted(TASKS) == ["classifier", "race", "squad_v1", "squad_v2"]
    for name, task in TASKS.items():
        script = (ROOT / f"run_{name}.py").read_text(encoding="utf-8")
        assert f'TASKS["{name}"]' in script and task.config_file.is_file()
    assert "importlib" not in (ROOT / "export.py").read_text(encoding="utf-8")


def test_every_requirement_names_its_oldest_version_and_the_installed_ones_fit():
    """A range, not a pin or nothing: users tied to an older MindSpore (Ascend's CANN) can install the package, and
    the floors say what was tried."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
            requirement = Requirement(line)
            assert {spec.operator for spec in requirement.specifier} & {">=", "=="}, f"{name}: {line} has no floor"
            try:
                installed = version(requirement.name)
            except PackageNotFoundError:
                continue  # requirements-dev.txt where only requirements.txt is installed
            assert requirement.specifier.contains(installed, prereleases=True), f"{name}: {line} vs {installed}"
