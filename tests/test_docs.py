"""The documentation check: README, CONTRIBUTING, docs/ and the benchmark log, in English and Chinese.

- EN/CN twins (README.md/README_CN.md, CONTRIBUTING.md/CONTRIBUTING_CN.md, docs/X.md/docs/X_CN.md) have the same
  heading structure (count and levels) and identical fenced code blocks (log literals are never translated);
- every `--flag` of every documented command (bash blocks, `$ `/`+ ` lines of text blocks, inline code that starts
  with an entry point) exists for that entry point: the yaml keys of run_*.py, pretrain_eval.py, export.py and the
  data tools (model_utils/config.py turns every key, nested ones with dots, into a flag), the argparse options of
  src.predict, src.convert_checkpoint, ... and benchmarks/*.py (their parsers are built in-process), and for
  scripts/*.sh the flags of the python script they pass them to;
- every relative link resolves, and every #anchor exists (GitHub's heading slugs, Chinese headings included);
- no path of the writer's machine (the checkout, its parent, $HOME, the temporary folder), no "issue N" reference
  and no hand-written test count.

The checkers are plain functions, so the tests below also plant a bogus flag, a bad anchor and an absolute path into
copies of the documents and assert that each is reported.
"""
import argparse
import importlib
import re
import shlex
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from model_utils.config import flatten, load_yaml_documents

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = sorted([ROOT / "README.md", ROOT / "README_CN.md", ROOT / "CONTRIBUTING.md", ROOT / "CONTRIBUTING_CN.md"]
                   + list((ROOT / "docs").glob("*.md")))
ALL_DOCS = USER_DOCS + [ROOT / "benchmarks" / "results" / "README.md"]

YAML_SCRIPTS = {
    "run_pretrain.py": "pretrain_config.yaml",
    "pretrain_eval.py": "pretrain_config.yaml",
    "run_classifier.py": "task_classifier_config.yaml",
    "run_race.py": "task_race_config.yaml",
    "run_squad_v1.py": "task_squad_v1_config.yaml",
    "run_squad_v2.py": "task_squad_v2_config.yaml",
}
EXPORT_TASKS = {"classifier": "task_classifier_config.yaml", "race": "task_race_config.yaml",
                "squad_v1": "task_squad_v1_config.yaml", "squad_v2": "task_squad_v2_config.yaml",
                "pretrain": "pretrain_config.yaml"}
DATA_TOOLS = {"src.sample_corpus": "sample_corpus", "src.spm_train": "spm", "src.create_pretraining_data": "pretraining",
              "src.create_finetune_data": "finetune", "src.create_squad_data": "squad"}
ARGPARSE_MODULES = ("src.predict", "src.convert_checkpoint", "src.squad_postprocess", "src.plot_metrics",
                    "src.model_summary")
BENCHMARKS = ("bench_train.py", "bench_infer.py", "bench_data.py", "bench_accuracy.py", "bench_products.py")
COMMON = {"--config_path", "--verbose", "--help"}


# ---------------------------------------------------------------------------------------------------- markdown

def fenced_blocks(text: str) -> List[Tuple[str, List[str]]]:
    """(info string, lines) of every fenced code block."""
    blocks, info, body = [], None, []
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            if info is None:
                info, body = stripped[3:].strip(), []
            else:
                blocks.append((info, body))
                info = None
        elif info is not None:
            body.append(line)
    return blocks


def prose_lines(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, line) of every line outside code fences."""
    fence = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield number, line


def headings(text: str) -> List[Tuple[int, str]]:
    return [(len(m.group(1)), m.group(2).strip()) for _, line in prose_lines(text)
            for m in [re.match(r"^(#{1,6})\s+(.*)$", line)] if m]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped (letters of any script, digits, '-', '_' and
    spaces kept), spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> Set[str]:
    seen: Dict[str, int] = {}
    result = set()
    for _, heading in headings(text):
        base = slug(heading)
        if base in seen:
            seen[base] += 1
            result.add(f"{base}-{seen[base]}")
        else:
            seen[base] = 0
            result.add(base)
    return result


def twin(path: Path) -> Path:
    return path.with_name(path.stem + "_CN.md")


def pairs() -> List[Tuple[Path, Path]]:
    english = [p for p in USER_DOCS if not p.stem.endswith("_CN")]
    return [(p, twin(p)) for p in english]


# ---------------------------------------------------------------------------------------------------- commands

class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__("parser")
        self.parser = parser


def _capture_parser(module_name: str) -> Set[str]:
    """The option strings of the parser a module's main() builds (parse_known_args intercepted, nothing runs)."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[assignment]
    try:
        module = importlib.import_module(module_name)
        try:
            module.main([])
        except _Captured as captured:
            return {s for s in captured.parser._option_string_actions if s.startswith("--")}
        raise AssertionError(f"{module_name}.main built no argparse parser")
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[assignment]


@lru_cache(maxsize=None)
def yaml_flags(yaml_name: str, section: Optional[str] = None) -> frozenset:
    values = load_yaml_documents(ROOT / yaml_name)[0]
    if section is not None:
        values = values[section]
    return frozenset({"--" + key for key in flatten(values)} | COMMON)


@lru_cache(maxsize=None)
def argparse_flags(module: str) -> frozenset:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    return frozenset(_capture_parser(module))


def _value_of(tokens: List[str], flag: str) -> Optional[str]:
    for i, token in enumerate(tokens):
        if token == flag and i + 1 < len(tokens):
            return tokens[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def entry_point(tokens: List[str]) -> Optional[Tuple[str, int]]:
    """(entry point, index of its token) of a command's tokens, or None for other programs."""
    for i, token in enumerate(tokens):
        name = token.lstrip("[")
        base = name.rsplit("/", 1)[-1]
        if name in ("-m",) and i + 1 < len(tokens):
            module = tokens[i + 1]
            if module.startswith("src."):
                return module, i + 1
            return None  # pytest, wikiextractor, pip ...
        if name in ("-c", "pip", "pip3"):
            return None
        if base in YAML_SCRIPTS or base == "export.py" or (base in BENCHMARKS and "/" not in name.replace("benchmarks/", "")):
            return base, i
        if name.startswith("scripts/") and name.endswith(".sh"):
            return name, i
        if i == 0 and re.fullmatch(r"src\.\w+", name):
            return name, i
    return None


def allowed_flags(entry: str, tokens: List[str]) -> frozenset:
    if entry in YAML_SCRIPTS:
        return yaml_flags(YAML_SCRIPTS[entry])
    if entry == "export.py":
        config = _value_of(tokens, "--config_path")
        task = _value_of(tokens, "--task")
        if task in EXPORT_TASKS:
            task_yamls = [EXPORT_TASKS[task]]
        elif config and Path(config).name in EXPORT_TASKS.values():
            task_yamls = [Path(config).name]
        else:
            task_yamls = sorted(set(EXPORT_TASKS.values()))
        flags = set(yaml_flags("export_config.yaml"))
        for name in task_yamls:
            flags |= yaml_flags(name)
        return frozenset(flags)
    if entry in DATA_TOOLS:
        return yaml_flags("create_data_config.yaml", DATA_TOOLS[entry])
    if entry in ARGPARSE_MODULES:
        return argparse_flags(entry)
    if entry in BENCHMARKS:
        return argparse_flags(entry[:-3])
    if entry.startswith("scripts/"):
        name = Path(entry).name
        if not (ROOT / entry).is_file():
            raise KeyError(f"no such script: {entry}")
        task = re.fullmatch(r"run_(\w+?)_(single|distribute)\.sh", name)
        if not task:
            raise KeyError(f"no flag table for {entry}")
        return yaml_flags(YAML_SCRIPTS[f"run_{task.group(1)}.py"])
    raise KeyError(f"no flag table for entry point {entry}")


def split_commands(line: str) -> List[List[str]]:
    """The simple commands of one shell line, as token lists (comments dropped, split at ; & && | ||)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    commands, current = [], []
    for token in tokens:
        if token and set(token) <= set(";&|()<>"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


def documented_commands(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, command line) of every command a page shows."""
    lines = text.split("\n")
    info = None
    logical, first = "", 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            info = stripped[3:].strip() if info is None else None
            logical = ""
            continue
        if info is None:
            continue
        if info in ("bash", "sh", "shell"):
            candidate = line
        elif info == "text":
            if logical:
                candidate = line
            elif stripped.startswith("$ ") or stripped.startswith("+ "):
                candidate = stripped[2:]
            else:
                continue
        else:
            continue
        if not logical:
            first = number
        if candidate.rstrip().endswith("\\"):
            logical += candidate.rstrip()[:-1] + " "
            continue
        yield first, logical + candidate
        logical = ""
    # inline code that starts with an entry point
    paragraph: List[Tuple[int, str]] = []
    for number, line in list(prose_lines(text)) + [(len(lines) + 1, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        joined = " ".join(l for _, l in paragraph)
        for span in re.findall(r"`([^`]+)`", joined):
            tokens = span.split()
            if not tokens or "--" not in span:
                continue
            head = tokens[0]
            if head in ("python", "bash") or head.endswith(".py") or head.startswith("scripts/") or \
                    re.fullmatch(r"src\.\w+", head):
                yield (paragraph[0][0] if paragraph else number), span
        paragraph = []


def check_flags(text: str, where: str) -> List[str]:
    problems = []
    for number, line in documented_commands(text):
        for tokens in split_commands(line):
            found = entry_point(tokens)
            if found is None:
                continue
            entry, index = found
            try:
                allowed = allowed_flags(entry, tokens)
            except KeyError as err:
                problems.append(f"{where}:{number}: {err}")
                continue
            for token in tokens[index + 1:]:
                flag = token.strip("[]").split("=", 1)[0]
                if flag.startswith("--") and len(flag) > 2 and flag not in allowed:
                    problems.append(f"{where}:{number}: {entry} has no option {flag}")
    return problems


# ---------------------------------------------------------------------------------------------------- links, paths

def check_links(path: Path, text: str) -> List[str]:
    problems = []
    own = anchors(text)
    for number, line in prose_lines(text):
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            file_part, _, anchor = target.partition("#")
            if file_part:
                resolved = (path.parent / file_part).resolve()
                if not resolved.exists():
                    problems.append(f"{path.name}:{number}: link to a missing file {target}")
                    continue
                if anchor:
                    if resolved.suffix != ".md":
                        problems.append(f"{path.name}:{number}: anchor into a non-markdown file {target}")
                    elif anchor not in anchors(resolved.read_text(encoding="utf-8")):
                        problems.append(f"{path.name}:{number}: no heading for #{anchor} in {file_part}")
            elif anchor not in own:
                problems.append(f"{path.name}:{number}: no heading for #{anchor}")
    return problems


def machine_paths() -> List[str]:
    paths = {str(ROOT), str(ROOT.parent), str(Path.home()), str(Path(tempfile.gettempdir()).resolve()),
             tempfile.gettempdir()}
    return sorted(p for p in paths if p not in ("/", ""))


def check_text(text: str, where: str, user_doc: bool = True) -> List[str]:
    problems = []
    for number, line in enumerate(text.split("\n"), 1):
        for path in machine_paths():
            if re.search(re.escape(path) + r"(?=$|[/\s`'\")\]:,;])", line):
                problems.append(f"{where}:{number}: a path of this machine: {path}")
        if user_doc and re.search(r"\bissues? \d+\b|\bissue #\d+", line, re.IGNORECASE):
            problems.append(f"{where}:{number}: an issue-tracker reference")
        if re.search(r"\b\d[\d,]* tests\b", line):
            problems.append(f"{where}:{number}: a hand-written test count")
    return problems


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------- tests

def test_every_page_has_its_twin():
    for path in USER_DOCS:
        if not path.stem.endswith("_CN"):
            assert twin(path).is_file(), f"{path.name} has no Chinese twin {twin(path).name}"
        else:
            assert path.with_name(path.stem[:-3] + ".md").is_file(), f"{path.name} has no English twin"


@pytest.mark.parametrize("english", [p for p, _ in pairs()], ids=lambda p: str(p.relative_to(ROOT)))
def test_twins_have_the_same_headings_and_code(english):
    chinese = twin(english)
    en, cn = read(english), read(chinese)
    levels_en = [level for level, _ in headings(en)]
    levels_cn = [level for level, _ in headings(cn)]
    assert levels_en == levels_cn, (f"{english.name} and {chinese.name} differ in heading structure:\n"
                                    f"{headings(en)}\n{headings(cn)}")
    blocks_en, blocks_cn = fenced_blocks(en), fenced_blocks(cn)
    assert len(blocks_en) == len(blocks_cn), f"{english.name}: {len(blocks_en)} code blocks, {chinese.name}: {len(blocks_cn)}"
    for i, (a, b) in enumerate(zip(blocks_en, blocks_cn)):
        assert a == b, f"code block {i + 1} differs between {english.name} and {chinese.name}:\n{a}\n---\n{b}"


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_flags_exist(path):
    assert check_flags(read(path), str(path.relative_to(ROOT))) == []


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_anchors_resolve(path):
    assert check_links(path, read(path)) == []


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths_or_tracker_references(path):
    assert check_text(read(path), str(path.relative_to(ROOT)), user_doc=path in USER_DOCS) == []


def test_readme_keeps_the_test_command_in_its_quick_start():
    text = read(ROOT / "README.md")
    quick = text[text.index("## Quick start"):text.index("## Script description")]
    assert any("python -m pytest" in line and line.rstrip().endswith("python -m pytest")
               for _, body in fenced_blocks(quick) for line in body)


def test_the_commands_are_found():
    """The extraction sees commands in bash blocks, `$ ` lines of logs and inline code."""
    text = read(ROOT / "docs" / "fine-tuning.md")
    entries = {entry_point(tokens)[0] for _, line in documented_commands(text) for tokens in split_commands(line)
               if entry_point(tokens)}
    assert {"run_classifier.py", "run_race.py", "run_squad_v1.py", "run_squad_v2.py", "src.create_finetune_data",
            "src.create_squad_data", "src.convert_checkpoint", "scripts/run_classifier_single.sh",
            "scripts/run_classifier_distribute.sh", "src.squad_postprocess"} <= entries


def test_a_planted_bogus_flag_is_reported():
    text = read(ROOT / "README.md")
    command = next(line for _, line in documented_commands(text) if "run_classifier.py" in line)
    planted = f"```bash\n{command.replace('--num_class 2', '--num_class 2 --bogus_flag 1')}\n```\n"
    problems = check_flags(planted, "planted")
    assert any("--bogus_flag" in p for p in problems), problems
    for entry in ("python -m src.predict --model m.onnx --bogus_flag 1", "bash scripts/run_race_single.sh out --bogus_flag 1",
                  "python benchmarks/bench_train.py --network albert_base --bogus_flag 1",
                  "python export.py --config_path task_race_config.yaml --bogus_flag 1",
                  "python -m src.create_squad_data --input_file x.json --bogus_flag 1"):
        assert any("--bogus_flag" in p for p in check_flags(f"```bash\n{entry}\n```\n", "planted")), entry
    inline = "Run `python -m src.create_finetune_data --task_name mrpc --bogus_flag 1` first."
    assert any("--bogus_flag" in p for p in check_flags(inline + "\n", "planted"))


def test_a_planted_bad_anchor_and_file_are_reported():
    path = ROOT / "docs" / "serving.md"
    text = read(path) + "\nSee [nowhere](#no-such-heading), [there](pretraining.md#no-such-heading) and [gone](missing.md).\n"
    problems = check_links(path, text)
    assert len([p for p in problems if "no-such-heading" in p]) == 2, problems
    assert any("missing.md" in p for p in problems), problems


def test_a_planted_machine_path_and_issue_reference_are_reported():
    text = read(ROOT / "README.md") + f"\nrun it in {ROOT}/output, see issue 7\n"
    problems = check_text(text, "planted")
    assert any("a path of this machine" in p for p in problems), problems
    assert any("issue-tracker" in p for p in problems), problems


def test_slugs_follow_github():
    assert slug("Low precision: int8 and bfloat16") == "low-precision-int8-and-bfloat16"
    assert slug("低精度：int8 与 bfloat16") == "低精度int8-与-bfloat16"
    assert slug("pretrain_config.yaml") == "pretrain_configyaml"
    assert slug("Running on GPU / Ascend") == "running-on-gpu--ascend"
