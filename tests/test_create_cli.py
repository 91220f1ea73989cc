"""The data tools as users run them: `python -m src.<tool> --flag value`, driven by create_data_config.yaml."""
import subprocess
import sys

import pytest
import yaml

from model_utils.config import flatten, parse_cli

TOOLS = {"sample_corpus": "src.sample_corpus", "spm": "src.spm_train", "pretraining": "src.create_pretraining_data", "finetune": "src.create_finetune_data",
         "squad": "src.create_squad_data"}


def _run(project_root, module, *args):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=project_root, capture_output=True,
                          text=True, timeout=120)


def test_every_key_has_help_and_every_section_parses(project_root):
    values, helps, _ = yaml.safe_load_all((project_root / "create_data_config.yaml").read_text(encoding="utf-8"))
    assert set(values) == set(TOOLS)
    for section, keys in values.items():
        for key in flatten(keys):
            assert helps.get(f"{section}.{key}"), f"{section}.{key} has no help"
        config = parse_cli(project_root / "create_data_config.yaml", [], section=section)
        assert config.to_dict() == keys
    google_flags = {"input_file", "output_file", "vocab_file", "spm_model_file", "do_lower_case", "max_seq_length",
                    "max_predictions_per_seq", "masked_lm_prob", "dupe_factor", "short_seq_prob", "ngram",
                    "random_seed"}
    assert google_flags <= set(values["pretraining"])
    assert {"doc_stride", "max_query_length", "version_2_with_negative"} <= set(values["squad"])


def test_quick_start_chain_from_the_command_line(tmp_path, project_root):
    """Corpus shipped with Python -> SentencePiece vocabulary -> pretraining MindRecord -> dataset batches."""
    corpus, prefix, records = tmp_path / "corpus.txt", tmp_path / "spm", tmp_path / "pt.mindrecord"
    done = _run(project_root, "src.sample_corpus", "--output_file", corpus)
    assert done.returncode == 0, done.stderr
    text = corpus.read_text(encoding="utf-8")
    assert text.count("\n\n") > 50 and len(text) > 300000
    done = _run(project_root, "src.spm_train", "--input_file", corpus, "--model_prefix", prefix, "--vocab_size", 2000)
    assert done.returncode == 0, done.stderr
    args = ["--input_file", corpus, "--spm_model_file", f"{prefix}.model", "--max_seq_length", 64,
            "--dupe_factor", 1, "--records_per_file", 500]
    # Its own process has not loaded MindSpore: 2 workers (forked) make instances while it writes the files.
    done = _run(project_root, "src.create_pretraining_data", *args, "--output_file", records, "--num_workers", 2)
    assert done.returncode == 0, done.stderr
    assert "summary: documents=" in done.stdout and "instances=" in done.stdout
    assert any(line.startswith("input: ") and "B in " in line for line in done.stderr.splitlines())  # progress
    log = (tmp_path / "logs" / "create_pretraining_data.log").read_text()  # each tool's log beside its output
    assert "summary: documents=" in log and "input: " in log
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["create_pretraining_data.log",
                                                                     "sample_corpus.log", "spm_train.log"]
    import dataset
    from src import create_pretraining_data
    batch = next(dataset.create_pretraining_dataset(records, 8, seed=0).create_dict_iterator(output_numpy=True))
    assert batch["input_ids"].shape == (8, 64) and batch["input_ids"].max() < 2000
    # The same files as one process writes them.
    serial = tmp_path / "serial.mindrecord"
    assert create_pretraining_data.main([*map(str, args), "--output_file", str(serial), "--progress", "false"]) == 0
    files = dataset.load_data_meta(records)["files"]
    assert len(files) >= 2 and files == [f"pt.mindrecord{i:05d}" for i in range(len(files))]
    for name in files:
        assert _rows(tmp_path / name) == _rows(tmp_path / name.replace("pt.", "serial."))


def _rows(path):
    import mindspore.dataset as ds
    data = ds.MindDataset([str(path)], shuffle=False)
    return [b"".join(v.tobytes() for v in row) for row in data.create_tuple_iterator(output_numpy=True)]


@pytest.mark.parametrize("tool", sorted(TOOLS.values()))
def test_help_and_errors(tool, project_root):
    done = _run(project_root, tool, "--help")
    assert done.returncode == 0 and "--config_path" in done.stdout
    done = _run(project_root, tool, "--overwrte", "true")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: unknown option '--overwrte'; did you mean '--overwrite'?"]


def test_missing_input_is_one_line_error(tmp_path, project_root, assets):
    done = _run(project_root, "src.create_finetune_data", "--task_name", "rte", "--data_dir", tmp_path,
                "--output_file", tmp_path / "o.mindrecord", "--spm_model_file",
                assets / "tokenizer" / "albert_30k-clean.model")
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: input file not found: {tmp_path / 'train.tsv'}"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("section", ["pretraining", "finetune", "squad"])
def test_max_seq_length_is_checked_against_the_position_table(section):
    """Every published ALBERT has 512 positions: longer data fits no network unless the user says theirs has more."""
    from model_utils.errors import UserError
    from src.data.input_text import parse_tool_config
    assert parse_tool_config(["--max_seq_length", "512"], section, "").max_seq_length == 512
    with pytest.raises(UserError, match=r"^max_seq_length 513 exceeds max_position_embeddings 512 .*"
                                        r"set --max_position_embeddings"):
        parse_tool_config(["--max_seq_length", "513"], section, "")
    longer = parse_tool_config(["--max_seq_length", "1024", "--max_position_embeddings", "1024"], section, "")
    assert longer.max_seq_length == 1024


def test_every_tool_also_runs_as_a_file_from_any_directory(project_root, tmp_path):
    """`python src/TOOL.py` as ModelZoo's scripts are run (was: ModuleNotFoundError: No module named 'model_utils')."""
    tools = sorted(path for path in (project_root / "src").glob("*.py") if "__main__" in path.read_text("utf-8"))
    assert len(tools) >= 10
    for tool in tools:
        done = subprocess.run([sys.executable, str(tool), "--help"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and done.stdout.startswith("usage:"), (tool.name, done.stderr[-2000:])
