"""export.py --file_format HF against HF transformers itself: an HF model converted in and exported out comes back
tensor for tensor; a network pretrained here (a checkpoint in the middle of the run) and classifier, RACE and SQuAD
v1.1 heads fine-tuned here by run_*.py load with `from_pretrained` without a missing or unexpected weight and give
the logits of our network on the same inputs; the tokenizer files encode text as our tokenizer does (slow and fast
transformers tokenizers, SentencePiece and WordPiece); a text-classification pipeline in a Python that has only
transformers and torch (no sentencepiece, protobuf, MindSpore or this package) gives src.predict's labels.
"""
import contextlib
import inspect
import io
import shutil
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import pytest

from tests.finetune_helpers import ASSETS, SPM, TINY_FINETUNE, make_glue, make_race, make_squad
from model_utils.errors import UserError
from tests.pretrain_helpers import ENV, TINY, ok, run, run_together

pytestmark = pytest.mark.skipif(not ASSETS.is_dir(), reason=f"test assets not found at {ASSETS}")
NO_DROPOUT = ["--net_cfg.hidden_dropout_prob", "0", "--classifier_dropout_prob", "0"]
LARGE_INIT = ["--net_cfg.initializer_range", "0.1"]  # outputs far from zero after a few steps: differences show
HEAD_INPUTS = ("input_ids", "segment_ids", "input_mask")  # the data's columns in the head's argument order
ROWS = 6  # evaluation rows compared per network


def export_in_process(*argv: str) -> str:
    """export.py's main in this process (no second MindSpore start-up); returns what it printed."""
    import export

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert export.main(list(argv)) == 0
    return printed.getvalue()


# ------------------------------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("name", ["groups2_inner2_gelu_new", "exact_gelu_3layers", "groups3_relu_typevocab3"])
def test_an_hf_model_converted_and_exported_comes_back_bit_identical(name, tmp_path):
    """HF AlbertForPreTraining -> src.convert_checkpoint -> export.py --file_format HF: every tensor transformers
    saved comes back with the same name, dtype and bits, and config.json holds every key of transformers'
    AlbertConfig with the model's values (the activation under HF's own name)."""
    from safetensors.numpy import load_file
    from transformers import AlbertConfig as HfConfig

    from tests.hf_reference import TINY_CONFIGS, make_hf_pretraining, save_hf
    from src.conversion.convert_checkpoint import convert

    save_hf(make_hf_pretraining(TINY_CONFIGS[name], seed=4), tmp_path / "hf", safetensors=True)
    convert("hf", str(tmp_path / "hf"), str(tmp_path / "ours.ckpt"))
    export_in_process("--file_format", "HF", "--task", "pretrain", "--export_ckpt_file", str(tmp_path / "ours.ckpt"),
                      "--export_file_name", str(tmp_path / "back"))
    original, back = load_file(str(tmp_path / "hf" / "model.safetensors")), load_file(str(tmp_path / "back" /
                                                                                           "model.safetensors"))
    assert sorted(back) == sorted(original)
    for key, value in original.items():
        assert back[key].dtype == value.dtype and back[key].tobytes() == value.tobytes(), key
    theirs = json.loads((tmp_path / "hf" / "config.json").read_text())
    ours = json.loads((tmp_path / "back" / "config.json").read_text())
    hf_keys = set(inspect.signature(HfConfig.__init__).parameters) - {"self", "kwargs"}
    assert hf_keys <= set(ours) and ours["model_type"] == "albert"
    assert {key: ours[key] for key in hf_keys | {"architectures"}} == {key: theirs[key] for key in
                                                                      hf_keys | {"architectures"}}
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["README.md", "config.json", "model.safetensors"]


# ----------------------------------------------------------------------------- networks trained here, exported
@pytest.fixture(scope="module")
def runs(data, tmp_path_factory) -> Dict[str, Path]:
    """Checkpoints of real runs on the real assets: pretraining stopped in the middle of its run (step 2 of 3, with
    groups and inner groups), a classifier that memorises 32 MRPC pairs (so it tells them apart), RACE and SQuAD v1.1
    for a few steps."""
    folder = tmp_path_factory.mktemp("hf_runs")
    made = {"mrpc": make_glue(folder, "mrpc", 32, 16, seq=64), "race": make_race(folder, seq=64),
            "squad": make_squad(folder, "1.1", paragraphs=2, seq=64)}
    commands = {"pretrain": ["run_pretrain.py", "--data_dir", str(data["train"]), *TINY,
                             "--net_cfg.num_hidden_layers", "4", "--net_cfg.num_hidden_groups", "2",
                             "--net_cfg.inner_group_num", "2", "--train_steps", "3", "--save_checkpoint_steps", "2",
                             "--save_checkpoint_num", "2"]}
    finetune = {"classifier": ("run_classifier.py", made["mrpc"], ["--train_steps", "60", "--train_batch_size", "8",
                                                                   "--net_cfg.hidden_act", "gelu_exact",
                                                                   "--optimizer_cfg.AdamWeightDecay.learning_rate",
                                                                   "1e-3", *NO_DROPOUT]),
                "race": ("run_race.py", made["race"], ["--train_steps", "3", "--train_batch_size", "4", *LARGE_INIT]),
                "squad_v1": ("run_squad_v1.py", made["squad"], ["--train_steps", "3", "--train_batch_size", "8",
                                                                *LARGE_INIT])}
    for task, (script, files, flags) in finetune.items():
        commands[task] = [script, *TINY_FINETUNE, "--train_data_file_path", str(files["train"]), "--do_eval", "false",
                          *flags]
    for done in run_together([argv + ["--output_dir", str(folder / task)] for task, argv in commands.items()]):
        ok(done)
    checkpoints = {"pretrain": folder / "pretrain" / "checkpoints" / "albert_pretrain-2.ckpt",
                   **{task: folder / task / "checkpoints" / f"albert_{task}-{steps}.ckpt"
                      for task, steps in (("classifier", 60), ("race", 3), ("squad_v1", 3))}}
    assert all(path.is_file() for path in checkpoints.values()), checkpoints
    return {**checkpoints, "pretrain_eval": data["eval"], "spm_small": data["folder"] / "spm.model",
            "classifier_dev": made["mrpc"]["dev"], "classifier_train_tsv": made["mrpc"]["train"].with_suffix(".tsv"),
            "race_dev": made["race"]["dev"], "squad_v1_dev": made["squad"]["dev"]}


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory) -> Dict[str, Path]:
    """Each checkpoint exported with its vocabulary: pretraining by the command line in its own process (the
    user's path, end to end), the heads in this process."""
    folder = tmp_path_factory.mktemp("hf_exports")
    done = ok(run(["export.py", "--file_format", "HF", "--task", "pretrain", "--export_ckpt_file",
                   str(runs["pretrain"]), "--export_file_name", str(folder / "pretrain"), "--spm_model_file",
                   str(runs["spm_small"])]))
    assert f"as AlbertForPreTraining: {folder / 'pretrain'} (README.md, config.json, model.safetensors" in done.stdout
    assert "AutoModelForPreTraining.from_pretrained(" in done.stdout
    flags = {"classifier": ["--task_name", "mrpc"], "race": [], "squad_v1": []}
    for task, extra in flags.items():
        printed = export_in_process("--file_format", "HF", "--config_path", f"task_{task}_config.yaml",
                                    "--export_ckpt_file", str(runs[task]), "--export_file_name", str(folder / task),
                                    "--spm_model_file", SPM, *extra)
        assert "load it with transformers.Auto" in printed
        if task == "squad_v1":
            assert "note: albert.pooler.* left out: the question-answering head never reads" in printed
    return {task: folder / task for task in ("pretrain", *flags)}


def hf_model(folder: Path):
    """The exported folder through the Auto class its config names, checking that nothing was missing, unexpected
    or of another shape."""
    import transformers

    config = json.loads((folder / "config.json").read_text())
    auto = {"AlbertForPreTraining": "AutoModelForPreTraining",
            "AlbertForSequenceClassification": "AutoModelForSequenceClassification",
            "AlbertForMultipleChoice": "AutoModelForMultipleChoice",
            "AlbertForQuestionAnswering": "AutoModelForQuestionAnswering"}[config["architectures"][0]]
    model, info = getattr(transformers, auto).from_pretrained(str(folder), output_loading_info=True,
                                                                attn_implementation="eager")
    assert type(model).__name__ == config["architectures"][0]
    assert {key: value for key, value in info.items() if value} == {}, info
    return model.eval()


def columns(path: Path, names, rows: int = ROWS) -> List[np.ndarray]:
    from src.data.pipelines import read_column

    return [read_column(str(path), name)[:rows].astype(np.int32) for name in names]


def ours(task: str, checkpoint: Path, arrays: List[np.ndarray]) -> List[np.ndarray]:
    """Our network's outputs for the checkpoint, built and loaded as evaluation builds it."""
    from mindspore import Tensor

    from model_utils.config import parse_cli
    from src.common.checkpoint_io import load_weights, read_checkpoint
    from src.model.albert import PORTABLE, AlbertConfig
    from src.model.pretraining_heads import AlbertPreTraining
    from src.serving.finetuned_heads import build_head
    from src.tasks.registry import TASKS

    net = AlbertConfig.from_json_file(str(checkpoint.parent / "albert_config.json"))
    if task == "pretrain":
        network = AlbertPreTraining(net)
        network.set_train(False)
        load_weights(network, str(checkpoint))
    else:
        network = build_head(read_checkpoint(str(checkpoint)), task, parse_cli(TASKS[task].config_file, []), net,
                             PORTABLE, str(checkpoint))
    outputs = network(*[Tensor(array) for array in arrays])
    return [output.asnumpy() for output in (outputs if isinstance(outputs, tuple) else (outputs,))]


def torch_inputs(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray) -> dict:
    import torch

    return {"input_ids": torch.from_numpy(input_ids).long(), "token_type_ids": torch.from_numpy(token_type_ids).long(),
            "attention_mask": torch.from_numpy(attention_mask).long()}


def assert_close(expected: np.ndarray, actual: np.ndarray) -> None:
    assert expected.shape == actual.shape and np.abs(expected).max() > 1e-2  # not a degenerate output
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5)


@pytest.mark.slow  # the runs fixture trains four networks (~30-50 s on 2 cores)
def test_pretrained_here_gives_its_mlm_and_sop_logits_in_transformers(runs, exported):
    """A checkpoint from the middle of a pretraining run (optimizer state, loss scale and progress beside the
    weights): AlbertForPreTraining with the decoder tied to the word embeddings gives our masked-LM logits at the
    masked positions of real evaluation rows, and our sentence-order logits."""
    import torch

    model = hf_model(exported["pretrain"])
    assert model.predictions.decoder.weight.data_ptr() == model.albert.embeddings.word_embeddings.weight.data_ptr()
    arrays = columns(runs["pretrain_eval"], HEAD_INPUTS + ("masked_lm_positions",))
    mlm, sop = ours("pretrain", runs["pretrain"], arrays)
    with torch.no_grad():
        out = model(**torch_inputs(*arrays[:3]))
    positions = arrays[3][:, :, None].astype(np.int64)
    assert_close(np.take_along_axis(out.prediction_logits.numpy(), positions, axis=1), mlm)
    assert_close(out.sop_logits.numpy(), sop)


@pytest.mark.slow  # the runs fixture trains four networks (~30-50 s on 2 cores)
@pytest.mark.parametrize("task", ["classifier", "race", "squad_v1"])
def test_fine_tuned_here_gives_its_logits_in_transformers(task, runs, exported):
    """The head's outputs on evaluation rows of its real data: classifier logits, RACE choice logits ([batch, 4,
    seq] inputs), SQuAD v1.1 start and end logits wherever p_mask lets an answer be (transformers returns every
    position's raw logit; ours are -1e30 where p_mask is 1, the positions outside the context)."""
    import torch

    model = hf_model(exported[task])
    names = HEAD_INPUTS + (("p_mask",) if task == "squad_v1" else ())
    arrays = columns(runs[f"{task}_dev"], names)
    expected = ours(task, runs[task], arrays)
    with torch.no_grad():
        out = model(**torch_inputs(*arrays[:3]))
    if task != "squad_v1":
        assert_close(out.logits.numpy(), expected[0])
        return
    allowed = arrays[3] == 0
    assert 0 < allowed.sum() < allowed.size
    for theirs, mine in zip((out.start_logits, out.end_logits), expected):
        assert_close(theirs.numpy()[allowed], mine[allowed])
        assert (mine[~allowed] < -1e29).all()


def sample_texts() -> List[str]:
    """Real sentences and paragraphs (GLUE, SQuAD) and text that exercises each preprocessing step."""
    mrpc = [line.split("\t") for line in
            (ASSETS / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig").splitlines()[1:201]]
    cola = [line.split("\t")[3] for line in
            (ASSETS / "glue" / "CoLA" / "in_domain_dev.tsv").read_text(encoding="utf-8").splitlines()[:200]]
    squad = json.loads((ASSETS / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json").read_text(encoding="utf-8"))
    paragraphs = [p for article in squad["data"][:3] for p in article["paragraphs"]]
    return ([text for row in mrpc for text in row[3:5]] + cola + [p["context"] for p in paragraphs] +
            [qa["question"] for p in paragraphs for qa in p["qas"]] +
            ["  Tabs\tand\nnewlines,\u00a0no-break\u3000spaces  ", "In 1990, 1,000,000 people (12, 13,) came.",
             "Café naïve Über ﬁne ½ Ⅻ", "``TeX quotes'' and \"plain\" ones", "a [MASK] b [SEP] c",
             "x\u0301y \u200bz"])


def encoded(tokenizer, text_a: str, text_b: str = None) -> List[List[int]]:
    """Our ids and segment ids of [CLS] a [SEP] (b [SEP]), as the data tools pack them."""
    first = [tokenizer.cls_id] + tokenizer.encode(text_a) + [tokenizer.sep_id]
    second = tokenizer.encode(text_b) + [tokenizer.sep_id] if text_b is not None else []
    return [first + second, [0] * len(first) + [1] * len(second)]


def assert_encodes_as_ours(folder: Path, ours_tokenizer, slow_class: str, fast_class: str, texts: List[str]) -> None:
    import transformers

    slow = getattr(transformers, slow_class).from_pretrained(str(folder))
    fast = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert type(fast).__name__ == fast_class
    pairs = list(zip(texts[::2], texts[1::2]))
    for tokenizer in (slow, fast):
        got = [[e["input_ids"], e["token_type_ids"]] for e in (tokenizer(text) for text in texts)]
        assert got == [encoded(ours_tokenizer, text) for text in texts]
        got = [[e["input_ids"], e["token_type_ids"]] for e in (tokenizer(a, b) for a, b in pairs)]
        assert got == [encoded(ours_tokenizer, a, b) for a, b in pairs]


def random_classifier(folder: Path, vocab_size: int) -> Path:
    """A 2-class classifier with random weights over a `vocab_size`-token vocabulary, saved with its config as
    fine-tuning saves one (for what needs no trained weights)."""
    from src.common.checkpoint_io import save_checkpoint_atomic
    from src.model.albert import AlbertConfig
    from src.model.task_heads import AlbertForSequenceClassification

    config = AlbertConfig(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    save_checkpoint_atomic(AlbertForSequenceClassification(config, 2), str(folder / "cls.ckpt"))
    config.to_json_file(str(folder / "cls.ckpt.json"))
    return folder / "cls.ckpt"


def test_sentencepiece_tokenizer_files_encode_as_ours(tokenizer, spm_path, tmp_path):
    """spiece.model (AlbertTokenizer) and tokenizer.json (AlbertTokenizerFast, what AutoTokenizer picks) give our
    ids and segment ids for ~1000 real texts and pairs; the settings our tokenizer used are recorded."""
    export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file",
                      str(random_classifier(tmp_path, 30000)), "--export_file_name", str(tmp_path / "model"),
                      "--spm_model_file", spm_path)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        "README.md", "config.json", "model.safetensors", "special_tokens_map.json", "spiece.model", "tokenizer.json",
        "tokenizer_config.json"]
    assert_encodes_as_ours(tmp_path / "model", tokenizer, "AlbertTokenizer", "AlbertTokenizerFast", sample_texts())
    settings = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert (settings["do_lower_case"], settings["keep_accents"], settings["model_max_length"]) == (True, False, 128)


def test_wordpiece_tokenizer_files_encode_as_ours(tmp_path):
    """albert_zh: a classifier over the 21128-token WordPiece vocab.txt exported with it loads, and BertTokenizer and
    BertTokenizerFast (AutoTokenizer, by config.json's tokenizer_class) give our ids for Chinese news and English."""
    from src.data.tokenization import FullTokenizer

    vocab = ASSETS / "tokenizer" / "albert_zh_vocab.txt"
    export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file",
                      str(random_classifier(tmp_path, 21128)), "--export_file_name", str(tmp_path / "zh"),
                      "--vocab_file", str(vocab))
    assert json.loads((tmp_path / "zh" / "config.json").read_text())["tokenizer_class"] == "BertTokenizer"
    hf_model(tmp_path / "zh")
    from huggingface_hub import ModelCard

    # the card says the model is Chinese and shows it on Chinese text (was: no language, an English example)
    card = ModelCard.load(tmp_path / "zh" / "README.md")
    assert card.data.language == ["zh"] and '"text": "今天天气怎么样？"' in card.text
    news = [line for line in (ASSETS / "pretrain" / "albert_zh_news_zh_1.txt").read_text(encoding="utf-8").splitlines()
            if line.strip()]  # all 213 of the sample
    assert_encodes_as_ours(tmp_path / "zh", FullTokenizer(str(vocab), True), "BertTokenizer", "BertTokenizerFast",
                           news + sample_texts()[:200])


# A Python where only transformers and torch can be imported: sentencepiece and protobuf (which the slow tokenizer
# and transformers' own conversion of spiece.model need), MindSpore and this package are made unimportable, and the
# working directory is not the project's.
BARE_PYTHON = """
import json, sys
for name in ("sentencepiece", "google.protobuf", "mindspore", "src", "model_utils"):
    sys.modules[name] = None
import transformers
folder, pairs = sys.argv[1], json.loads(open(sys.argv[2]).read())
classify = transformers.pipeline("text-classification", model=folder, device="cpu")
answers = classify([{"text": a, "text_pair": b} for a, b in pairs])
print(json.dumps({"answers": answers, "tokenizer": type(classify.tokenizer).__name__,
                  "ids": [classify.tokenizer(a, b)["input_ids"] for a, b in pairs]}))
"""


@pytest.mark.slow  # the runs fixture trains four networks (~30-50 s on 2 cores)
def test_pipeline_in_a_python_with_only_transformers_gives_src_predicts_labels(runs, exported, tokenizer, tmp_path):
    """transformers.pipeline("text-classification") on the exported MRPC head, in a process without sentencepiece,
    protobuf, MindSpore or this package, gives for real MRPC pairs the label and probability that src.predict gives
    for the fine-tuned checkpoint (the label names from --task_name mrpc), from the ids our tokenizer makes. The pairs
    are the ones it memorised, so both labels come up."""
    rows = [line.split("\t") for line in runs["classifier_train_tsv"].read_text(encoding="utf-8").splitlines()[1:]]
    pairs = [(row[3], row[4]) for row in rows]
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"text_a": a, "text_b": b}) + "\n" for a, b in pairs))
    bare = subprocess.run([sys.executable, "-c", BARE_PYTHON, str(exported["classifier"]),
                           str(tmp_path / "pairs.json")], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert bare.returncode == 0, bare.stderr[-3000:]
    theirs = json.loads(bare.stdout.strip().splitlines()[-1])
    assert theirs["tokenizer"] == "AlbertTokenizerFast"
    assert theirs["ids"] == [encoded(tokenizer, a, b)[0] for a, b in pairs]
    ok(run(["-m", "src.predict", "--model", str(runs["classifier"]), "--task", "classifier", "--spm_model_file", SPM,
            "--input_file", str(tmp_path / "requests.jsonl"), "--output_file", str(tmp_path / "answers.jsonl"),
            "--seq_length", "128", "--device_target", "CPU"]))
    answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [answer["label"] for answer in theirs["answers"]] == [answer["label"] for answer in answers]
    assert len({answer["label"] for answer in answers}) == 2  # the head tells pairs apart: not one label for all
    np.testing.assert_allclose([answer["score"] for answer in theirs["answers"]],
                               [answer["probabilities"][answer["label"]] for answer in answers], rtol=0, atol=1e-5)


def test_a_failed_export_leaves_nothing_and_overwrite_replaces_an_earlier_export_whole(tmp_path, monkeypatch):
    """The folder is made in a hidden folder beside it and renamed into place: a write that fails midway leaves
    neither a folder nor a temporary one; with --overwrite a folder holding only an earlier export's files is
    replaced whole (its tokenizer files, which the new export does not write, go with it)."""
    import safetensors.numpy

    checkpoint = random_classifier(tmp_path, 100)
    args = ["--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint)]

    def disk_full(tensors, path, metadata=None):
        Path(path).write_bytes(b"half a file")
        raise OSError(28, "No space left on device", path)

    with monkeypatch.context() as patch:
        patch.setattr(safetensors.numpy, "save_file", disk_full)
        with pytest.raises(OSError, match="No space left"):
            export_in_process(*args, "--export_file_name", str(tmp_path / "out" / "model"))
    assert list((tmp_path / "out").iterdir()) == []
    export_in_process(*args, "--export_file_name", str(tmp_path / "first"))
    (tmp_path / "out" / "model").mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "spiece.model"):
        (tmp_path / "out" / "model" / name).write_bytes(b"an earlier export")
    (tmp_path / "out" / "model" / "README.md").write_text(EXPORT_CARD)  # its card says so
    export_in_process(*args, "--export_file_name", str(tmp_path / "out" / "model"), "--overwrite", "true")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model"]
    assert sorted(p.name for p in (tmp_path / "out" / "model").iterdir()) == ["README.md", "config.json",
                                                                              "model.safetensors"]
    for name in ("config.json", "model.safetensors"):  # README.md names its folder
        assert (tmp_path / "out" / "model" / name).read_bytes() == (tmp_path / "first" / name).read_bytes()


def tree(folder: Path) -> Dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("planted", ["checkpoints", "notes.txt", ".ipynb_checkpoints", "home"])
def test_overwrite_refuses_a_folder_holding_anything_but_an_export(planted, tmp_path, capsys, monkeypatch):
    """`--overwrite` replaces an earlier export, not the user's folder: a folder holding the checkpoint being
    exported (a run's output folder), any file an export does not write, or the home folder is refused with one
    line naming what is there, and nothing in it changes."""
    from model_utils.errors import run_cli

    import export

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # as if an export had been there too
    checkpoint = random_classifier(tmp_path, 100)
    if planted == "checkpoints":
        (folder / planted).mkdir()
        checkpoint = random_classifier(folder / planted, 100)
        expected = f"holds --export_ckpt_file ({checkpoint})"
    elif planted == "home":
        monkeypatch.setenv("HOME", str(folder))
        expected = f"is the home folder ({folder})"
    else:
        (folder / planted).write_bytes(b"mine")
        expected = f"holds {planted}, which this command does not write"
    before = tree(folder)
    code = run_cli(export.main, ["--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint),
                                 "--export_file_name", str(folder), "--overwrite", "true"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error.startswith(f"error: {folder} {expected}") and "\n" not in error, error
    assert tree(folder) == before and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


EXPORT_CARD = "---\nlibrary_name: transformers\ntags:\n- albert\n- mindspore\n---\n# an earlier export\n"


@pytest.mark.parametrize("card", [None, "---\nlibrary_name: transformers\ntags:\n- albert\n---\n# albert-base-v2\n"])
def test_overwrite_keeps_a_model_folder_it_did_not_write(card, tmp_path):
    """A model downloaded from the Hub holds the very file names an export writes (config.json, model.safetensors,
    spiece.model, README.md): --overwrite replaced it whole, its tokenizer included. Only a folder whose README.md is
    an export's card is an earlier export."""
    checkpoint = random_classifier(tmp_path, 100)
    folder = tmp_path / "albert-base-v2"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "spiece.model"):
        (folder / name).write_bytes(b"the Hub's")
    if card is not None:
        (folder / "README.md").write_text(card)
    before = tree(folder)
    with pytest.raises(UserError, match=f"^{folder} holds an HF model this command did not write"):
        export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint),
                          "--export_file_name", str(folder), "--overwrite", "true")
    assert tree(folder) == before
    (folder / "README.md").write_text(EXPORT_CARD)
    export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint),
                      "--export_file_name", str(folder), "--overwrite", "true")
    assert "mindspore" in (folder / "README.md").read_text() and not (folder / "spiece.model").exists()


def test_a_file_planted_during_the_export_keeps_the_folder(tmp_path, monkeypatch):
    """The folder is checked again once renamed aside: a file that appeared after the first check puts it back and
    stops the export; nothing is lost."""
    import src.common.atomic_files

    checkpoint = random_classifier(tmp_path, 100)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "README.md").write_text(EXPORT_CARD)  # an earlier export
    real_fsync = src.common.atomic_files.fsync_path

    def plant(path):
        if Path(path).name.startswith(".tmp-export-") and not (folder / "notes.txt").exists():
            (folder / "notes.txt").write_text("written while the export ran")
        real_fsync(path)

    monkeypatch.setattr(src.common.atomic_files, "fsync_path", plant)
    with pytest.raises(UserError, match=f"{folder} holds notes.txt, which this command does not write"):
        export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint),
                          "--export_file_name", str(folder), "--overwrite", "true")
    assert tree(folder) == {"config.json": b"{}", "README.md": EXPORT_CARD.encode(),
                            "notes.txt": b"written while the export ran"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_killed_exports_staging_folders_go_with_the_next_export(tmp_path):
    """kill -9 during an export leaves `.tmp-export-*` (and, mid-swap, its `.old` twin) beside the output; the
    next export into that folder removes them, and nothing else."""
    checkpoint = random_classifier(tmp_path, 100)
    for name in (".tmp-export-k1ll3d_x", ".tmp-export-k1ll3d_x.old", ".tmp-export-notours", "mine"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x" * 1000)
    export_in_process("--file_format", "HF", "--task", "classifier", "--export_ckpt_file", str(checkpoint),
                      "--export_file_name", str(tmp_path / "model"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-export-notours", "cls.ckpt", "cls.ckpt.json", "mine",
                                                          "model"]


# ------------------------------------------------------------------------------------------------ model card
def run_folder(root: Path, steps: Sequence[int]) -> Path:
    """A fine-tuning run's OUTPUT_DIR as run_classifier.py leaves it: checkpoints/albert_classifier-<step>.ckpt (a
    random 2-class head carrying the progress a run records) with albert_config.json, and eval/eval_results.json of
    the run's final weights on MRPC."""
    from src.common.checkpoint_io import save_checkpoint_atomic
    from src.model.albert import AlbertConfig
    from src.model.task_heads import AlbertForSequenceClassification
    from src.training.finetune import RUN_WEIGHTS

    config = AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    (root / "checkpoints").mkdir(parents=True)
    (root / "eval").mkdir()
    head = AlbertForSequenceClassification(config, 2)
    # the run's settings as runs record them (the first checkpoint: as a version that did not is left without)
    recorded = {"run_settings": json.dumps({"optimizer": "AdamWeightDecay", "train_steps": 500,
                                            "optimizer_cfg": {"AdamWeightDecay": {"learning_rate": 2e-05}}})}
    for index, step in enumerate(steps):
        progress = {"micro_step": 2 * step, "rows": 3668, "batch_size": 16, "group_size": 2, "accumulation_steps": 2,
                    "seed": 12345, "shuffle": 1, "overflow_count": 0, **(recorded if index == 0 else {})}
        save_checkpoint_atomic(head, str(root / "checkpoints" / f"albert_classifier-{step}.ckpt"), append_dict=progress)
    config.to_json_file(str(root / "checkpoints" / "albert_config.json"))
    results = {"task": "mrpc", "assessment_method": "f1", "score": 0.8912, "accuracy": 0.8480392156862745,
               "f1": 0.8912, "macro_f1": 0.8261, "mcc": 0.6302, "examples": 408, "rows": 408, "devices": 1,
               "checkpoint": RUN_WEIGHTS, "data": str(root / "mrpc_dev.mindrecord")}
    (root / "eval" / "eval_results.json").write_text(json.dumps(results))
    return root


def test_the_folder_carries_a_model_card_the_hub_reads(spm_path, tmp_path):
    """README.md is a model card that huggingface_hub parses: library, license, tags, pipeline, data set, base model
    and, from the run's eval_results.json (found beside the checkpoint when it is of that checkpoint, or given with
    --eval_results), every metric with its value; the text says how the checkpoint was trained and names no path of
    this machine; its usage example runs; config.json records the transformers format. An export without --task or
    --config_path names the head it detected."""
    from huggingface_hub import ModelCard

    run = run_folder(tmp_path / "out" / "mrpc", [300, 500])
    results = json.loads((run / "eval" / "eval_results.json").read_text())
    metrics = {key: results[key] for key in ("accuracy", "f1", "macro_f1", "mcc")}
    folder = tmp_path / "hf" / "albert-mrpc"
    printed = export_in_process("--file_format", "HF", "--export_ckpt_file", str(run / "checkpoints" /
                                "albert_classifier-500.ckpt"), "--export_file_name", str(folder), "--spm_model_file",
                                spm_path, "--base_model", "albert/albert-base-v2")
    assert "task: classifier, detected from the weights of" in printed
    assert "(classifier.* weights of 2 classes)" in printed
    import export
    said = io.StringIO()  # a misspelled flag: the error alone (the detection line came first, as if all were well)
    with contextlib.redirect_stdout(said), pytest.raises(UserError, match="did you mean '--base_model'"):
        export.main(["--file_format", "HF", "--export_ckpt_file", str(run / "checkpoints" / "albert_classifier-500.ckpt"),
                     "--export_file_name", str(tmp_path / "hf2"), "--spm_model_file", spm_path, "--base_modl", "x"])
    assert said.getvalue() == ""
    assert "note: model card README.md: the metrics of eval_results.json" in printed
    assert json.loads((folder / "config.json").read_text())["transformers_version"] == "4.57.6"
    text = (folder / "README.md").read_text(encoding="utf-8")
    card = ModelCard.load(folder / "README.md").data
    assert (card.library_name, card.license, card.pipeline_tag) == ("transformers", "apache-2.0", "text-classification")
    assert card.tags == ["albert", "mindspore", "text-classification", "mrpc"]
    assert (card.datasets, card.base_model, card.model_name) == (["nyu-mll/glue"], "albert/albert-base-v2",
                                                                 "albert-mrpc")
    assert card.metrics == ["accuracy", "f1", "matthews_correlation"]
    assert {result.metric_name: result.metric_value for result in card.eval_results} == metrics
    assert {(r.task_type, r.dataset_type, r.dataset_config) for r in card.eval_results} == {
        ("text-classification", "nyu-mll/glue", "mrpc")}
    assert "optimizer step 500, global batch 64 (16 x 2 device(s) x 2 accumulation step(s)), 3668 training rows " \
           "(8.72 epochs), data seed 12345" in text
    assert "were not given to the export" in text and "| f1 | 0.8912 |" in text and str(tmp_path) not in text
    usage = text.split("```python\n")[1].split("```")[0].replace('"user/model"', repr(str(folder)))
    exec(usage, {})  # the pipeline of the card's example loads the folder and classifies a pair

    # an earlier checkpoint of the run: the run's evaluation is not its own, unless given with --eval_results
    earlier = ["--file_format", "HF", "--task", "classifier", "--config_path", "task_classifier_config.yaml",
               "--export_ckpt_file", str(run / "checkpoints" / "albert_classifier-300.ckpt"), "--export_file_name",
               str(folder), "--overwrite", "true", "--license", ""]
    export_in_process(*earlier)
    text = (folder / "README.md").read_text(encoding="utf-8")
    card = ModelCard.load(folder / "README.md").data
    assert card.license is None and card.eval_results is None and card.metrics is None
    assert "No evaluation results: the run's eval_results.json is of albert_classifier-500.ckpt, not of " \
           "albert_classifier-300.ckpt" in text
    # the run's own settings, recorded in its checkpoint, not the yaml's defaults (train_steps -1 there)
    assert "Settings of the run that wrote the checkpoint (recorded in it):" in text
    assert "| `train_steps` | 500 |" in text and "| `optimizer_cfg.AdamWeightDecay.learning_rate` | 2e-05 |" in text
    assert "no tokenizer files" in text  # this time exported without a vocabulary
    export_in_process(*earlier, "--eval_results", str(run / "eval" / "eval_results.json"))
    card = ModelCard.load(folder / "README.md").data
    assert {result.metric_name: result.metric_value for result in card.eval_results} == metrics
    assert {result.dataset_split for result in card.eval_results} == {None}  # the evaluated data is not here
    # where it is, its split goes with the scores (an evaluation on training data was listed as "GLUE MRPC")
    (run / "mrpc_dev.mindrecord.meta.json").write_text(json.dumps({"files": ["mrpc_dev.mindrecord"],
                                                                  "split": "train"}))
    export_in_process(*earlier, "--eval_results", str(run / "eval" / "eval_results.json"))
    card = ModelCard.load(folder / "README.md").data
    assert {(result.dataset_config, result.dataset_split) for result in card.eval_results} == {("mrpc", "train")}


def test_a_pretraining_card_takes_the_runs_pretrain_eval_of_the_same_weights(runs, data, tmp_path):
    """pretrain_eval.py's default output, OUTPUT_DIR/pretrain_eval.json, is the pretraining run's evaluation (was: only
    with --eval_results; the card said "no evaluation results"); as for fine-tuning, only for the weights it scored.
    English ALBERT's vocabulary gives no language (Latin letters cannot tell which)."""
    from huggingface_hub import ModelCard

    out = tmp_path / "run"
    shutil.copytree(runs["pretrain"].parent, out / "checkpoints")
    ok(run(["pretrain_eval.py", "--eval_ckpt", str(out / "checkpoints" / "albert_pretrain-2.ckpt"),
                 "--eval_data_dir", str(data["eval"]), "--output_dir", str(out), "--eval_batch_size", "8"]))
    evaluation = json.loads((out / "pretrain_eval.json").read_text())
    printed = export_in_process("--file_format", "HF", "--task", "pretrain", "--export_ckpt_file",
                                str(out / "checkpoints" / "albert_pretrain-2.ckpt"), "--export_file_name",
                                str(tmp_path / "hf"), "--spm_model_file", str(runs["spm_small"]))
    assert "note: model card README.md: the metrics of pretrain_eval.json" in printed
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    metrics = {"masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss"}
    assert set(card.data.metrics) == metrics and card.data.language is None
    assert all(f"| {name} | {evaluation[name]:.4f} |" in card.text for name in metrics)
    export_in_process("--file_format", "HF", "--task", "pretrain", "--export_ckpt_file",
                      str(out / "checkpoints" / "albert_pretrain-3.ckpt"), "--export_file_name", str(tmp_path / "hf3"))
    assert "No evaluation results: the run's pretrain_eval.json is of other weights than albert_pretrain-3.ckpt's" \
        in (tmp_path / "hf3" / "README.md").read_text()


def test_the_cards_language_is_told_by_the_vocabulary_only_where_it_can_be(spm_path):
    """albert_zh's vocabulary is Chinese; English ALBERT's pieces say nothing (Latin letters); a vocabulary of kanji
    with many kana tokens is Japanese, not Chinese."""
    import sentencepiece

    from src.export.model_card import vocabulary_language

    zh = (ASSETS / "tokenizer" / "albert_zh_vocab.txt").read_text(encoding="utf-8").splitlines()
    english = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    assert vocabulary_language(zh) == "zh"
    assert vocabulary_language([english.id_to_piece(i) for i in range(english.get_piece_size())]) == ""
    assert vocabulary_language(zh + [chr(0x3042 + i % 80) + chr(0x30a2 + i // 80) for i in range(4000)]) == ""


def test_a_card_never_publishes_the_evaluation_of_another_task():
    """--task_name cola on an MRPC run's checkpoint published its MRPC metrics as CoLA's, and a classifier's
    eval_results.json given to a pretraining export was published as the fill-mask model's."""
    from model_utils.errors import UserError
    from src.export.model_card import check_evaluation

    mrpc = {"task": "mrpc", "assessment_method": "f1", "f1": 0.89, "accuracy": 0.85}
    with pytest.raises(UserError, match=r"^--task_name cola but R is the evaluation of mrpc: drop --task_name"):
        check_evaluation(mrpc, "classifier", "cola", "R")
    with pytest.raises(UserError, match=r"^R holds a classifier evaluation, not one of the pretrain model exported"):
        check_evaluation(mrpc, "pretrain", "", "R")
    with pytest.raises(UserError, match=r"^R holds a pretrain evaluation, not one of the squad_v1 model exported"):
        check_evaluation({"masked_lm_accuracy": 0.3, "sentence_order_accuracy": 0.6}, "squad_v1", "", "R")
    check_evaluation(mrpc, "classifier", "mrpc", "R")
    check_evaluation({"exact": 70.0, "f1": 73.0, "HasAns_exact": 60.0}, "squad_v2", "", "R")
    check_evaluation(None, "race", "", "R")


def test_the_cards_evaluation_is_of_the_same_weights_wherever_the_run_folder_went(tmp_path):
    """eval_results.json records the evaluated weights' digest (its checkpoint was the text "the fine-tuned weights of
    this run", then a path): a run folder copied or moved keeps its evaluation, and an evaluation of other weights
    under the same checkpoint name (a folder trained again after its checkpoints were deleted) is not published."""
    from src.export.model_card import find_eval_results

    run = tmp_path / "copy_of_run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "eval").mkdir()
    checkpoint = run / "checkpoints" / "albert_classifier-300.ckpt"
    checkpoint.write_bytes(b"x")
    results = {"task": "mrpc", "accuracy": 0.775, "checkpoint": "/elsewhere/run/checkpoints/albert_classifier-300.ckpt",
               "checkpoint_sha256": "digest-of-the-evaluated-weights"}
    (run / "eval" / "eval_results.json").write_text(json.dumps(results))
    found = find_eval_results("", str(checkpoint), "albert_classifier", "digest-of-the-evaluated-weights")
    assert found.values["accuracy"] == 0.775
    other = find_eval_results("", str(checkpoint), "albert_classifier", "digest-of-weights-trained-since")
    assert other.values is None and other.source == ("the run's eval_results.json is of other weights than "
                                                     "albert_classifier-300.ckpt's (--eval_results takes it anyway)")
