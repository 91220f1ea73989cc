"""model_utils/config.py: yaml values/help/choices documents turned into a typed command line."""
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from model_utils.config import ConfigError, flatten, load_yaml_documents, parse_cli, parse_interval

SCHEMA = textwrap.dedent("""\
    batch_size: 32
    enable_lossscale: true
    optimizer: Lamb
    load_checkpoint_path: ""
    ratio: 0.5
    ids: [1, 2]
    pad: null
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
    for argv in (["--enable_lossscale"], ["--enable_lossscale", "--batch_size", "8"]):  # alone: true
        assert parse_cli(schema, ["--enable_lossscale", "false"] + argv).enable_lossscale


@pytest.mark.parametrize("argv, message", [
    (["--batch_sise", "3"], "did you mean '--batch_size'"),
    (["--optimizer_cfg.Lamb.learning_rat", "3"], "did you mean '--optimizer_cfg.Lamb.learning_rate'"),
    (["--batch_size", "eight"], "key 'batch_size' expects int"),
    (["--batch_size", "2.5"], "key 'batch_size' expects int"),
    (["--ratio", "half"], "key 'ratio' expects float"),
    (["--enable_lossscale", "maybe"], "key 'enable_lossscale' expects true or false"),
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
    assert "--enable_lossscale [BOOL]" in out  # alone: true


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
def test_every_number_of_every_shipped_yaml_is_bounded(path):
    """A number open to infinity lets an absurd value allocate, spawn or train to NaN before any check: every int
    and float key, and every null key (its type comes from the value given: net_cfg's sizes), has choices or a
    finite interval. A new key without one fails here."""
    values, _, choices = load_yaml_documents(path)
    numbers = {key: value for key, value in flatten(values).items()
               if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))}
    assert numbers, f"{path.name}: no number found"
    unbounded = [key for key in numbers if key not in choices]
    unbounded += [key for key, spec in choices.items() if key in numbers and isinstance(spec, str)
                  and not all(map(math.isfinite, parse_interval(spec)[:2]))]
    assert unbounded == []


@pytest.mark.parametrize("name, key, good, bad", [
    ("pretrain_config.yaml", "optimizer_cfg.Lamb.learning_rate", "1", "1e30"),  # was accepted: trained to NaN
    ("task_classifier_config.yaml", "optimizer_cfg.AdamWeightDecay.learning_rate", "0.5", "2"),
    ("task_squad_v1_config.yaml", "optimizer_cfg.Lamb.end_learning_rate", "0", "1.5"),
    ("task_race_config.yaml", "clip_norm", "1000000", "1e7"),
    ("pretrain_config.yaml", "seed", "2147483647", str(2 ** 40)),  # numpy's seeds stop at 2**32 - 1
    ("pretrain_config.yaml", "seed", "0", "-7"),
    ("pretrain_config.yaml", "train_steps", "1000000000", "10000000000"),
    ("pretrain_config.yaml", "net_cfg.hidden_size", "16384", "1e9"),  # 1e9 is yaml 1.1 text: not in the range
    ("pretrain_config.yaml", "net_cfg.hidden_size", "16384", "1000000000"),
    ("task_classifier_config.yaml", "net_cfg.hidden_act", "gelu_new", "swish"),
])
def test_shipped_ranges_stop_absurd_values(project_root, name, key, good, bad):
    parse_cli(project_root / name, [f"--{key}", good])
    with pytest.raises(ConfigError, match=rf"command line: key '{key}' must be (in|one of)"):
        parse_cli(project_root / name, [f"--{key}", bad])


def test_float_keys_must_be_finite_in_float32(schema, tmp_path):
    """Every float setting ends up a float32: beyond 3.4e38 it is inf there, whatever the key's range says."""
    for raw in ("1e39", "-1e39", "inf", str(10 ** 50)):
        with pytest.raises(ConfigError, match=r"key 'optimizer_cfg.Lamb.learning_rate' must be finite in float32"):
            parse_cli(schema, ["--optimizer_cfg.Lamb.learning_rate", raw])
    (tmp_path / "inf.yaml").write_text("optimizer_cfg:\n  AdamWeightDecay:\n    learning_rate: .inf\n")
    with pytest.raises(ConfigError, match=r"inf.yaml: key 'optimizer_cfg.AdamWeightDecay.learning_rate' must be "
                                          r"finite in float32 \(at most 3.403e\+38 in size\), got inf"):
        parse_cli(schema, ["--config_path", str(tmp_path / "inf.yaml")])
    assert parse_cli(schema, ["--optimizer_cfg.Lamb.learning_rate", "3.4e38"]).optimizer_cfg.Lamb.learning_rate \
        == pytest.approx(3.4e38)


def _alias_bomb(levels: int) -> str:
    """Nested mappings of nine aliases each: `levels` lines that flatten into 9**levels keys."""
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: x" for j in range(9)) + "}"]
    lines += [f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(9)) + "}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_aliases_are_refused_before_anything_is_built(schema, tmp_path):
    """Nine levels: a 600-byte file whose flattening takes ~25 GB. Seven (4.8 million keys) here, which took
    seconds and gigabytes before aliases were refused; the file, line and anchor are named at once."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("batch_size: 4\n" + _alias_bomb(7))
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        parse_cli(schema, ["--config_path", str(bomb)])
    assert time.perf_counter() - started < 1
    assert str(err.value) == f"{bomb} line 2: yaml anchors and aliases are refused (&a0): write the values out"
    (tmp_path / "alias.yaml").write_text("base: {a: 1}\nbatch_size: *base\n")  # an alias of an undefined anchor
    with pytest.raises(ConfigError, match=r"alias.yaml line 2: yaml anchors and aliases are refused \(\*base\)"):
        parse_cli(schema, ["--config_path", str(tmp_path / "alias.yaml")])
    with pytest.raises(ConfigError, match=r"^command line: key 'pad': yaml anchors and aliases are refused \(&a\)"):
        parse_cli(schema, ["--pad", "&a [1, *a]"])


@pytest.mark.parametrize("argv, user_yaml, where", [
    (["--batch_size", "9" * 5000], None, "command line: key 'batch_size'"),
    (["--pad", "9" * 5000], None, "command line: key 'pad'"),  # a null key's value is read as yaml
    (["--ids", "[1, " + "9" * 5000 + "]"], None, "command line: key 'ids'"),
    ([], "ratio: 0.5\nbatch_size: " + "9" * 5000 + "\n", "{mine} line 2"),
    ([], "ids: [1, -" + "9" * 5000 + "]\n", "{mine} line 1"),
])
def test_over_long_integers_are_one_line(schema, tmp_path, argv, user_yaml, where):
    """Python refuses to convert an integer of more than 4300 digits (ValueError): from a flag or a yaml that was a
    traceback out of the parser (the fuzz tests found it); now one line naming the key or the file and line."""
    mine = tmp_path / "mine.yaml"
    if user_yaml:
        mine.write_text(user_yaml)
        argv = ["--config_path", str(mine)]
    with pytest.raises(ConfigError) as err:
        parse_cli(schema, argv)
    assert str(err.value) == f"{where.format(mine=mine)}: an integer of 5000 digits is refused (at most 100)"


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


def test_null_only_where_the_shipped_value_is_null_and_yaml_booleans_take_1_and_0(schema, tmp_path, monkeypatch):
    """`batch_size: null` (or `seed: null`) in a user's yaml passed every check and crashed the run later with a
    TypeError, after writing into its output folder; `enable_lossscale: 1` was refused though the docs list 1/0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "null.yaml").write_text("batch_size: null\n")
    with pytest.raises(ConfigError, match=r"null.yaml: key 'batch_size' cannot be null \(it expects int\): leave it "
                                          r"out for its default, 32"):
        parse_cli(schema, ["--config_path", "null.yaml"])
    (tmp_path / "nested.yaml").write_text("optimizer_cfg:\n  Lamb:\n    learning_rate: ~\n")
    with pytest.raises(ConfigError, match=r"key 'optimizer_cfg.Lamb.learning_rate' cannot be null"):
        parse_cli(schema, ["--config_path", "nested.yaml"])
    (tmp_path / "fine.yaml").write_text("pad: null\nenable_lossscale: 0\n")  # pad ships as null: null is its value
    config = parse_cli(schema, ["--config_path", "fine.yaml"])
    assert config.pad is None and config.enable_lossscale is False
    (tmp_path / "two.yaml").write_text("enable_lossscale: 2\n")
    with pytest.raises(ConfigError, match="key 'enable_lossscale' expects true or false, got 2"):
        parse_cli(schema, ["--config_path", "two.yaml"])


def test_another_scripts_yaml_is_named_as_such(project_root, tmp_path):
    """run_pretrain.py given the classifier's yaml said "unknown key 'do_train'; did you mean 'train_steps'?"."""
    mine = tmp_path / "mine.yaml"
    mine.write_text((project_root / "task_classifier_config.yaml").read_text())
    with pytest.raises(ConfigError, match=r"mine.yaml: unknown key 'do_train' \(and \d+ more\): they are keys of "
                                          r"task_classifier_config.yaml or task_race_config.yaml, the yaml of another script \(this one's is "
                                          r"pretrain_config.yaml\)"):
        parse_cli(project_root / "pretrain_config.yaml", ["--config_path", str(mine)])
    mine.write_text("do_train: true\n")  # one key alone: the closest key is the likelier mistake
    with pytest.raises(ConfigError, match="unknown key 'do_train'; did you mean"):
        parse_cli(project_root / "pretrain_config.yaml", ["--config_path", str(mine)])


def test_a_users_own_yaml_beside_the_shipped_ones_is_not_taken_for_another_scripts(project_root, tmp_path):
    """The check read every *.yaml beside the shipped one: a user's yaml kept there (as the docs' --config_path
    my.yaml suggests) with two typos was called "the yaml of another script" (itself)."""
    import shutil

    folder = tmp_path / "checkout"
    folder.mkdir()
    for name in ("pretrain_config.yaml", "task_classifier_config.yaml"):
        shutil.copy(project_root / name, folder / name)
    mine = folder / "my_pretrain.yaml"
    mine.write_text("batch_sise: 8\ntrain_step: 5\n")
    with pytest.raises(ConfigError, match=r"my_pretrain.yaml: unknown key 'batch_sise'; did you mean 'batch_size'"):
        parse_cli(folder / "pretrain_config.yaml", ["--config_path", str(mine)])


OPT = "optimizer_cfg.{}"
IN_STEPS = " (given in steps here, not as a fraction of training)"
CKPT_NOTE = " (a MindSpore checkpoint; src.convert_checkpoint converts Google's TF and HF's ALBERT weights)"
DATA_NOTE = "; it is the data's here: set it when making the data"


@pytest.mark.parametrize("yaml_name, argv, hint", [
    # was: '--train_steps'
    ("task_classifier_config.yaml", ["--num_train_epochs", "3"], "; did you mean '--epoch_num'?"),
    ("pretrain_config.yaml", ["--num_train_epochs", "3"], "; did you mean '--epoch_size'?"),
    # was: '--accumulation_steps', '--num_class', none
    ("task_classifier_config.yaml", ["--warmup_step", "9"], f"; did you mean '--{OPT}.warmup_steps'?"),
    ("task_classifier_config.yaml", ["--num_warmup_steps", "9"], f"; did you mean '--{OPT}.warmup_steps'?"),
    ("task_classifier_config.yaml", ["--warmup_ratio", ".1"], f"; did you mean '--{OPT}.warmup_proportion'?"),
    ("pretrain_config.yaml", ["--warmup_proportion", ".1"], f"; did you mean '--{OPT}.warmup_steps'{IN_STEPS}?"),
    ("pretrain_config.yaml", ["--warmup_ratio", ".1"], f"; did you mean '--{OPT}.warmup_steps'{IN_STEPS}?"),
    # was: '--train_steps', '--eval_batch_size', '--enable_data_sink'
    ("task_classifier_config.yaml", ["--save_steps", "9"], "; did you mean '--save_checkpoint_steps'?"),
    ("task_squad_v1_config.yaml", ["--epoch_size", "2"], "; did you mean '--epoch_num'?"),
    ("task_classifier_config.yaml", ["--adam_epsilon", "1e-6"], f"; did you mean '--{OPT}.eps'?"),
    # was: '--eval_data_file_path', '--save_checkpoint_num'
    ("task_classifier_config.yaml", ["--model_name_or_path", "x"],
     f"; did you mean '--load_pretrain_checkpoint_path'{CKPT_NOTE}?"),
    ("pretrain_config.yaml", ["--init_checkpoint", "x"], f"; did you mean '--load_checkpoint_path'{CKPT_NOTE}?"),
    ("task_classifier_config.yaml", ["--learning_rate", "1e-5"], f"; did you mean '--{OPT}.learning_rate'?"),
    # was: '--eval_batch_size', '--eval_output_file', none
    ("pretrain_config.yaml", ["--train_batch_size", "8"], "; did you mean '--batch_size'?"),
    ("pretrain_config.yaml", ["--input_file", "x"], "; did you mean '--data_dir'?"),
    ("pretrain_config.yaml", ["--max_seq_length", "128"], DATA_NOTE),
])
@pytest.mark.parametrize("optimizer", ["AdamWeightDecay", "Lamb"])
def test_foreign_flag_names_suggest_ours(project_root, yaml_name, argv, hint, optimizer):
    """Flags of Google's ALBERT/BERT, HF's and ModelZoo's scripts name our key (within the yaml's optimizer), or say
    what it is here; was: closeness alone, `--num_train_epochs` -> '--train_steps'."""
    with pytest.raises(ConfigError) as err:
        parse_cli(project_root / yaml_name, ["--optimizer", optimizer] + argv)
    assert str(err.value) == f"unknown option '{argv[0]}'{hint.format(optimizer)}" or (
        hint == DATA_NOTE and str(err.value).startswith(f"unknown option '{argv[0]}'{hint}"))


def test_foreign_names_in_a_users_yaml_and_absl_negation(project_root, tmp_path):
    """The table serves yaml keys too; absl's `--nodo_lower_case` is `--do_lower_case false` (was: no suggestion;
    `--do_lower_case` alone would mean the opposite); `--x=True` is the option `--x` (was: named '--x=True')."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("num_train_epochs: 3\n")
    with pytest.raises(ConfigError, match=r"mine.yaml: unknown key 'num_train_epochs'; did you mean 'epoch_num'\?$"):
        parse_cli(project_root / "task_race_config.yaml", ["--config_path", str(mine)])
    with pytest.raises(ConfigError, match=r"^unknown option '--nodo_lower_case'; did you mean '--do_lower_case false'"):
        parse_cli(project_root / "create_data_config.yaml", ["--nodo_lower_case"], section="finetune")
    with pytest.raises(ConfigError, match=r"^unknown option '--nodo_lower_case'; it is the data's here"):
        parse_cli(project_root / "task_classifier_config.yaml", ["--nodo_lower_case"])
    # only a true/false key is negated so (was: '--seed false' suggested for --noseed)
    with pytest.raises(ConfigError) as err:
        parse_cli(project_root / "pretrain_config.yaml", ["--noseed"])
    assert "false" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^unknown option '--x'$"):
        parse_cli(project_root / "task_classifier_config.yaml", ["--x=True"])


def test_choices_take_other_spellings(project_root):
    """Google's run_classifier lowercases --task_name, HF and GLUE write sst2 and stsb (was: refused); `sts` stays
    refused (not one task's spelling alone)."""
    finetune = project_root / "create_data_config.yaml"
    for typed, task in [("MRPC", "mrpc"), ("sst2", "sst-2"), ("STSB", "sts-b"), ("mnli_mm", "mnli-mm")]:
        assert parse_cli(finetune, ["--task_name", typed], section="finetune").task_name == task
    assert parse_cli(project_root / "export_config.yaml", ["--task_name", "SST2"]).task_name == "sst-2"
    with pytest.raises(ConfigError, match="must be one of"):
        parse_cli(finetune, ["--task_name", "sts"], section="finetune")
    # only names other tools spell otherwise fold: `share_type None` is no 'none' (which unshares every layer), and
    # nothing folds onto an empty choice
    pretrain = project_root / "pretrain_config.yaml"
    assert parse_cli(pretrain, ["--optimizer", "lamb", "--device_target", "cpu"]).optimizer == "Lamb"
    with pytest.raises(ConfigError, match=r"key 'net_cfg.share_type' must be one of .* got 'None'"):
        parse_cli(pretrain, ["--net_cfg.share_type", "None"])
    with pytest.raises(ConfigError, match="key 'task' must be one of"):
        parse_cli(project_root / "export_config.yaml", ["--task", "-"])


@pytest.mark.parametrize("name, section, advice", [
    ("task_classifier_config.yaml", None, "pass it as --albert_config_file"),
    ("pretrain_config.yaml", None, "pass it as --albert_config_file"),
    ("create_data_config.yaml", "spm", "--config_path takes a yaml like create_data_config.yaml (this script takes "
                                       "no network config)"),
])
@pytest.mark.parametrize("json_text", [
    '{"architectures": ["AlbertForMaskedLM"], "model_type": "albert", "vocab_size": 30000}',  # HF's config.json
    '{"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "embedding_size": 16}',
])
def test_a_network_config_as_config_path_is_named(project_root, tmp_path, name, section, advice, json_text):
    """was: "unknown key 'architectures'", or "unknown key 'vocab_size'; did you mean 'net_cfg.vocab_size'"."""
    network = tmp_path / "config.json"
    network.write_text(json_text)
    with pytest.raises(ConfigError) as err:
        parse_cli(project_root / name, ["--config_path", str(network)], section=section)
    assert str(err.value) == (f"{network} is a network config (ALBERT's config json), not a yaml of this script: "
                              + advice)
