"""model_utils/config.py: yaml values/help/choices documents turned into a typed command line."""
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from model_utils.config import ConfigError, flatten, load_yaml_documents, parse_cli, parse_interval

SCHEMA = textwrap.dedent("""\
    batch_size: 32
    enable_lossscale: true
    optimizer: Lamb
    load_checkpoint_path: ""
    ratio: 0.5
    optimizer_cfg:
      Lamb:
        learning_rate: 3.0e-4
        warmup_steps: 10
      AdamWeightDecay:
        learning_rate: 5.0e-5
    ---
    batch_size: "samples per step"
    optimizer: "which optimizer to use"
    optimizer_cfg.Lamb.learning_rate: "peak learning rate of Lamb"
    ---
    optimizer: ["Lamb", "AdamWeightDecay"]
    batch_size: "[1, inf)"
    ratio: "(0, 1]"
    optimizer_cfg.Lamb.learning_rate: "(0, inf)"
    """)


@pytest.fixture()
def schema(tmp_path) -> Path:
    path = tmp_path / "default.yaml"
    path.write_text(SCHEMA)
    return path


def test_defaults_and_types(schema):
    config = parse_cli(schema, [])
    assert config.batch_size == 32 and config.enable_lossscale is True and config.optimizer == "Lamb"
    assert config.optimizer_cfg.Lamb.learning_rate == pytest.approx(3e-4)
    assert config.to_dict()["optimizer_cfg"]["AdamWeightDecay"]["learning_rate"] == pytest.approx(5e-5)
    assert "optimizer_cfg.Lamb.warmup_steps: 10" in str(config)


def test_nested_overrides_and_real_booleans(schema):
    config = parse_cli(schema, ["--optimizer_cfg.Lamb.learning_rate", "1e-4", "--enable_lossscale=false",
                                "--batch_size", "8", "--ratio", "1"])
    assert config.optimizer_cfg.Lamb.learning_rate == pytest.approx(1e-4)
    assert config.enable_lossscale is False and config.batch_size == 8
    assert isinstance(config.ratio, float) and config.ratio == 1.0
    for word, value in (("True", True), ("no", False), ("1", True), ("off", False)):
        assert parse_cli(schema, ["--enable_lossscale", word]).enable_lossscale is value


@pytest.mark.parametrize("argv, message", [
    (["--batch_sise", "3"], "did you mean '--batch_size'"),
    (["--optimizer_cfg.Lamb.learning_rat", "3"], "did you mean '--optimizer_cfg.Lamb.learning_rate'"),
    (["--batch_size", "eight"], "key 'batch_size' expects int"),
    (["--batch_size", "2.5"], "key 'batch_size' expects int"),
    (["--ratio", "half"], "key 'ratio' expects float"),
    (["--enable_lossscale", "maybe"], "key 'enable_lossscale' expects bool"),
    (["--optimizer", "SGD"], "key 'optimizer' must be one of ['Lamb', 'AdamWeightDecay']"),
    (["--batch_size", "0"], "command line: key 'batch_size' must be in [1, inf), got 0"),
    (["--ratio", "0"], "key 'ratio' must be in (0, 1], got 0.0"),
    (["--ratio", "1.5"], "key 'ratio' must be in (0, 1], got 1.5"),
    (["--optimizer_cfg.Lamb.learning_rate", "-1e-4"], "must be in (0, inf), got -0.0001"),  # a value, not a flag
    (["--optimizer_cfg.Lamb.learning_rate=-1e-4"], "must be in (0, inf), got -0.0001"),
])
def test_bad_command_lines(schema, argv, message):
    with pytest.raises(ConfigError) as err:
        parse_cli(schema, argv)
    assert message in str(err.value)


def test_user_yaml_overrides_and_is_checked(schema, tmp_path, monkeypatch):
    (tmp_path / "mine.yaml").write_text("batch_size: 4\noptimizer_cfg:\n  Lamb:\n    learning_rate: 1e-3\n")
    monkeypatch.chdir(tmp_path)  # --config_path is relative to where the user is, not to the module
    config = parse_cli(schema, ["--config_path", "mine.yaml", "--batch_size", "6"])
    assert config.batch_size == 6  # the command line wins over the user's yaml
    assert config.optimizer_cfg.Lamb.learning_rate == pytest.approx(1e-3)  # "1e-3" is a string in yaml 1.1
    assert config.optimizer_cfg.Lamb.warmup_steps == 10  # untouched keys keep the defaults

    (tmp_path / "typo.yaml").write_text("optimizer_cfg:\n  Lamb:\n    warmup_step: 5\n")
    with pytest.raises(ConfigError, match=r"typo.yaml: unknown key 'optimizer_cfg.Lamb.warmup_step'; "
                                          r"did you mean 'optimizer_cfg.Lamb.warmup_steps'"):
        parse_cli(schema, ["--config_path", "typo.yaml"])
    (tmp_path / "type.yaml").write_text("batch_size: many\n")
    with pytest.raises(ConfigError, match="type.yaml: key 'batch_size' expects int"):
        parse_cli(schema, ["--config_path", "type.yaml"])
    (tmp_path / "choice.yaml").write_text("optimizer: Adam\n")
    with pytest.raises(ConfigError, match="must be one of"):
        parse_cli(schema, ["--config_path", "choice.yaml"])
    (tmp_path / "range.yaml").write_text("batch_size: 0\n")
    with pytest.raises(ConfigError, match=r"range.yaml: key 'batch_size' must be in \[1, inf\), got 0"):
        parse_cli(schema, ["--config_path", "range.yaml"])
    (tmp_path / "broken.yaml").write_text("batch_size: 4\noptimizer: [Lamb\n")
    with pytest.raises(ConfigError, match=r"broken.yaml line \d+: malformed yaml"):
        parse_cli(schema, ["--config_path", "broken.yaml"])
    with pytest.raises(ConfigError, match="config file not found"):
        parse_cli(schema, ["--config_path", "absent.yaml"])


def test_section_of_a_multi_tool_yaml(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text("a_tool:\n  max_seq_length: 128\nb_tool:\n  doc_stride: 64\n---\n"
                    "a_tool.max_seq_length: 'tokens per instance'\n")
    config = parse_cli(path, ["--max_seq_length", "64"], section="a_tool")
    assert config.max_seq_length == 64 and "doc_stride" not in config
    with pytest.raises(ConfigError, match="did you mean '--max_seq_length'"):
        parse_cli(path, ["--max_seq_lenght", "64"], section="a_tool")


def test_attribute_errors_suggest_keys(schema):
    config = parse_cli(schema, [])
    with pytest.raises(AttributeError, match="did you mean 'batch_size'"):
        _ = config.bach_size


def test_help_shows_help_strings_choices_and_defaults(schema):
    code = ("import sys; from model_utils.config import parse_cli; parse_cli(sys.argv[1], ['--help'])")
    result = subprocess.run([sys.executable, "-c", code, str(schema)], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert result.returncode == 0
    out = " ".join(result.stdout.split())
    assert "--optimizer_cfg.Lamb.learning_rate FLOAT peak learning rate of Lamb (range: (0, inf)) [default: 0.0003]" \
        in out
    assert "which optimizer to use (choices: Lamb, AdamWeightDecay)" in out
    assert "samples per step (range: [1, inf)) [default: 32]" in out
    assert "--enable_lossscale BOOL" in out


def test_nothing_is_parsed_at_import():
    code = "import sys; sys.argv += ['--bogus']; import model_utils.config; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok"


def test_ranges_accept_their_bounds_and_the_shipped_defaults(schema, project_root):
    config = parse_cli(schema, ["--batch_size", "1", "--ratio", "1", "--optimizer_cfg.Lamb.learning_rate", "2e-5"])
    assert config.batch_size == 1 and config.ratio == 1.0
    for name in ("pretrain_config.yaml", "task_classifier_config.yaml", "task_race_config.yaml",
                 "task_squad_v1_config.yaml", "task_squad_v2_config.yaml", "export_config.yaml"):
        parse_cli(project_root / name, [])  # every shipped default lies in its own range


SHIPPED = sorted(Path(__file__).resolve().parents[1].glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_integer_ranges_have_an_upper_bound(path):
    """A count, size or thread number open to infinity lets an absurd value allocate or spawn before any check."""
    values, _, choices = load_yaml_documents(path)
    flat = flatten(values)
    integers = {key: spec for key, spec in choices.items()
                if isinstance(spec, str) and isinstance(flat[key], int) and not isinstance(flat[key], bool)}
    assert integers, f"{path.name}: no integer range found"
    assert {key: spec for key, spec in integers.items() if math.isinf(parse_interval(spec)[1])} == {}


@pytest.mark.parametrize("name, section, key, largest, absurd", [
    ("pretrain_config.yaml", None, "batch_size", 65536, 1000000000),
    ("pretrain_config.yaml", None, "cpu_threads", 1024, 4096),
    ("task_squad_v2_config.yaml", None, "start_n_top", 512, 100000),
    ("export_config.yaml", None, "export_seq_length", 8192, 100000),
    ("create_data_config.yaml", "pretraining", "num_workers", 256, 100000),
    ("create_data_config.yaml", "pretraining", "dupe_factor", 1000, 1000001),
])
def test_absurd_sizes_stop_when_the_flags_are_read(project_root, name, section, key, largest, absurd):
    with pytest.raises(ConfigError, match=rf"key '{key}' must be in \[\d+, {largest}\], got {absurd}"):
        parse_cli(project_root / name, [f"--{key}", str(absurd)], section=section)
    assert parse_cli(project_root / name, [f"--{key}", str(largest)], section=section)[key] == largest
