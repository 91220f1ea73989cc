"""The package's layout rules that code review would otherwise have to remember: library code in src/ never
imports an entry-point module at the top level (dataset.py, export.py, run_*.py, pretrain_eval.py), and every task
is defined once, in src/tasks/registry.py, for every entry point that needs one; every requirement has a floor."""
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
    from src.tasks.registry import TASKS

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


# The floors of the code under src/ (docs/internals.md, "Layout"), bottom first: a module imports only from its own
# folder or the folders below it, and the files at the top of src/ are the commands and ModelZoo's import paths.
FLOORS = ("common", "data", "model", "conversion", "devices", "tasks", "training", "serving", "export")
SRC_ENTRY_POINTS = {"albert_model", "convert_checkpoint", "create_finetune_data", "create_pretraining_data",
                    "create_squad_data", "dataset", "model_summary", "plot_metrics", "predict", "sample_corpus",
                    "spm_train", "squad_postprocess", "tokenization"}


def src_imports(path: Path) -> set:
    """Every `src...` module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("src"):
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("src."))
    return found


def test_the_top_of_src_holds_only_the_commands_and_modelzoo_import_paths():
    assert {path.stem for path in (ROOT / "src").glob("*.py")} - {"__init__"} == SRC_ENTRY_POINTS
    assert {path.name for path in (ROOT / "src").iterdir() if path.is_dir() and path.name != "__pycache__"} \
        == set(FLOORS)


def test_each_floor_imports_only_from_itself_and_the_floors_below():
    offenders = []
    for floor, name in enumerate(FLOORS):
        for path in sorted((ROOT / "src" / name).rglob("*.py")):
            for module in src_imports(path):
                parts = module.split(".")
                target = parts[1] if len(parts) > 1 else ""
                if target not in FLOORS or FLOORS.index(target) > floor:
                    offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_the_modelzoo_import_paths_still_reach_the_code():
    """Scripts written against ModelZoo's layout or earlier releases import these paths; each is the code's own
    object, not a copy."""
    import importlib

    import dataset
    from src.conversion import convert_checkpoint as conversion
    from src.data import pipelines
    from src.data import tokenization as data_tokenization
    from src.model import albert
    from src.tasks import squad_metrics

    old = {name: importlib.import_module(f"src.{name}") for name in
           ("albert_model", "dataset", "tokenization", "convert_checkpoint", "squad_postprocess")}
    assert old["albert_model"].AlbertModel is albert.AlbertModel
    assert old["albert_model"].AlbertConfig is albert.AlbertConfig
    assert old["dataset"].create_classification_dataset is pipelines.create_classification_dataset
    assert dataset.create_pretraining_dataset is pipelines.create_pretraining_dataset
    assert old["tokenization"].FullTokenizer is data_tokenization.FullTokenizer
    assert old["convert_checkpoint"].convert_hf is conversion.convert_hf
    assert old["squad_postprocess"].evaluate_v1 is squad_metrics.evaluate_v1


def test_every_record_schema_is_defined_once():
    """The column names of each record live in src/data/schema.py; the writers, readers and the task registry take
    them from there instead of spelling them out."""
    spelled = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        if path.name == "schema.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) >= 3 and all(
                    isinstance(e, ast.Constant) and e.value in ("input_ids", "input_mask", "segment_ids")
                    for e in node.elts[:3]):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert spelled == []
