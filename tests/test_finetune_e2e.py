"""Every fine-tuning task end to end on the real assets with a tiny model: create data -> train -> eval/predict ->
metrics and predictions files; loss falls; checkpoints reload; bad input. The scores in eval_results.json are
recomputed independently: classification and RACE by scikit-learn, STS-B by scipy.stats, from predictions.tsv and
the true labels read from the source files (never from the MindRecord); SQuAD by the scoring CLI."""
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from tests.finetune_helpers import ASSETS, SPM, TINY_FINETUNE, make_glue, make_glue_like, make_race, make_squad
from tests.pretrain_helpers import check_curves, metrics_by_step, ok, run, tensorboard, tool

pytestmark = pytest.mark.skipif(not ASSETS.is_dir(), reason=f"test assets not found at {ASSETS}")
NO_DROPOUT = ["--net_cfg.hidden_dropout_prob", "0", "--classifier_dropout_prob", "0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("finetune_data")
    return {"cola": make_glue(folder, "cola", 200, 40, seq=32), "mrpc": make_glue(folder, "mrpc", 64, 40, seq=64),
            "race": make_race(folder), "squad1": make_squad(folder, "1.1"), "squad2": make_squad(folder, "2.0")}


def finetune(script: str, out, *flags: str):
    return run([script, "--output_dir", str(out), *TINY_FINETUNE, *flags])


def losses(out) -> list:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def tsv_rows(path) -> list:
    lines = path.read_text().splitlines()
    return [line.split("\t") for line in lines[1:]]


def source_labels(tsv: Path, column: int, header: bool) -> list:
    """The label column of a GLUE tsv as written (the file the MindRecord was made from)."""
    lines = tsv.read_text(encoding="utf-8-sig").splitlines()[int(header):]
    return [line.split("\t")[column].strip() for line in lines]


def race_answers(split: str) -> list:
    """RACE answers in the official layout's order: <split>/{high,middle}/*.txt sorted, questions in file order."""
    files = sorted((ASSETS / "race" / "RACE" / split).glob("*/*.txt"))
    return [answer for path in files for answer in json.loads(path.read_text(encoding="utf-8"))["answers"]]


def race_question_ids(split: str) -> list:
    """RACE question ids as Google's race_utils makes them: level-file-question index, in the same order."""
    files = sorted((ASSETS / "race" / "RACE" / split).glob("*/*.txt"))
    return [f"{path.parent.name}-{path.name}-{index}" for path in files
            for index in range(len(json.loads(path.read_text(encoding="utf-8"))["answers"]))]


def check_classification_scores(folder: Path, labels: list, label_names: list, ids: Sequence[str]) -> dict:
    """eval_results.json against scikit-learn on predictions.tsv and the true labels: accuracy, macro F1, Matthews
    correlation and, with two classes, F1 of the second label (GLUE's positive class). Also: one row per example
    in order, the task's label names, and each predicted label the most probable one. Returns the results."""
    from sklearn import metrics

    results = json.loads((folder / "eval_results.json").read_text())
    header, *rows = [line.split("\t") for line in (folder / "predictions.tsv").read_text().splitlines()]
    assert header == ["row", "prediction"] + [f"p_{name}" for name in label_names] + ["id"], header
    assert [int(row[0]) for row in rows] == list(range(len(labels)))
    assert [row[-1] for row in rows] == list(ids)  # each row's example
    predicted = [row[1] for row in rows]
    probabilities = np.array([[float(p) for p in row[2:-1]] for row in rows])
    assert np.allclose(probabilities.sum(1), 1.0, atol=1e-5)
    assert all(p[label_names.index(label)] == p.max() for p, label in zip(probabilities, predicted))
    expected = {"accuracy": metrics.accuracy_score(labels, predicted),
                "macro_f1": metrics.f1_score(labels, predicted, average="macro"),
                "mcc": metrics.matthews_corrcoef(labels, predicted)}
    if len(label_names) == 2:
        expected["f1"] = metrics.f1_score(labels, predicted, pos_label=label_names[1])
    assert results["examples"] == len(labels) and set(expected) <= set(results), results
    for name, value in expected.items():
        assert results[name] == pytest.approx(value, abs=1e-9), (name, results, expected)
    assert results["score"] == results[results["assessment_method"]]
    return results


@pytest.fixture(scope="module")
def cola_run(data, tmp_path_factory):
    """run_classifier.py fitting 200 real CoLA rows (2 classes, hidden 32): its output folder and stdout. Also the
    2-class checkpoint test_a_checkpoint_with_another_head_size_is_an_error evaluates as a 3-class classifier."""
    out = tmp_path_factory.mktemp("cola_run")
    cola = data["cola"]
    result = ok(finetune("run_classifier.py", out, "--train_data_file_path", str(cola["train"]),
                         "--eval_data_file_path", str(cola["train"]), "--train_batch_size", "16", "--epoch_num", "20",
                         "--assessment_method", "mcc", "--optimizer_cfg.AdamWeightDecay.learning_rate", "5e-4",
                         *NO_DROPOUT))
    return out, result


def test_classifier_overfits_200_real_cola_rows(data, cola_run):
    cola = data["cola"]
    tmp_path, result = cola_run
    results = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
    assert results["task"] == "cola" and results["examples"] == results["rows"] == 200
    assert results["score"] == results["mcc"] and results["accuracy"] >= 0.9, result.stdout[-2000:]
    curve = losses(tmp_path)
    assert curve[-1] < 0.5 * curve[0], curve
    labels = source_labels(cola["train"].with_suffix(".tsv"), 1, header=False)
    check_classification_scores(tmp_path / "eval", labels, ["0", "1"], [f"train-{i}" for i in range(200)])


def test_classifier_train_eval_predict_and_reload(data, tmp_path):
    """Also: the dev rows predicted from 3 partitions (dealt round-robin) come out in the order of the dev file, as
    its evaluation does (was: partition after partition)."""
    mrpc = data["mrpc"]
    dealt = tmp_path / "dealt" / "mrpc_dev.mindrecord"
    tool("create_finetune_data", ["--task_name", "mrpc", "--input_file", mrpc["dev"].with_suffix(".tsv"), "--split",
                                  "dev", "--output_file", dealt, "--spm_model_file", SPM, "--max_seq_length", "64",
                                  "--partition_number", "3"])
    stranger = tmp_path / "run" / "checkpoints" / "albert_classifier-999.ckpt"  # damaged, not the run's
    stranger.parent.mkdir(parents=True)
    stranger.write_bytes(b"not a checkpoint" * 64)
    train = ok(finetune("run_classifier.py", tmp_path / "run", "--train_data_file_path", str(mrpc["train"]),
                        "--eval_data_file_path", str(mrpc["dev"]), "--do_predict", "true",
                        "--predict_data_file_path", f"{dealt}0", "--train_batch_size", "8", "--train_steps", "6",
                        "--assessment_method", "f1"))
    results = json.loads((tmp_path / "run" / "eval" / "eval_results.json").read_text())
    assert results["assessment_method"] == "f1" and results["rows"] == 40 and results["devices"] == 1
    final = tmp_path / "run" / "checkpoints" / "albert_classifier-6.ckpt"  # was: "the fine-tuned weights of this run"
    assert results["checkpoint"] == str(final) and f"with {final}" in train.stdout + train.stderr
    from src.common.checkpoint_io import contents_digest, read_checkpoint
    assert results["checkpoint_sha256"] == contents_digest(read_checkpoint(str(final)))  # what the HF export checks
    import hashlib
    recorded = json.loads(str(read_checkpoint(str(final))["run_tokenizer"]))  # what serving checks its tokenizer by
    assert recorded["model_file"] == "albert_30k-clean.model" and recorded["do_lower_case"] is True
    assert recorded["model_sha256"] == hashlib.sha256(Path(SPM).read_bytes()).hexdigest()[:16]
    check_classification_scores(tmp_path / "run" / "eval", source_labels(mrpc["dev"].with_suffix(".tsv"), 0, True),
                                ["0", "1"], [f"dev-{i}" for i in range(40)])
    assert (tmp_path / "run" / "predict" / "predictions.tsv").read_text() == \
        (tmp_path / "run" / "eval" / "predictions.tsv").read_text()
    assert "final weights sha256" in train.stdout
    # What the run reports besides: progress of each evaluation (plain last lines: no terminal here), its log, and
    # TensorBoard summaries equal to metrics.jsonl and eval_results.json at the step of the weights.
    assert [line for line in train.stderr.splitlines() if line.startswith(("eval: ", "predict: "))] == \
        [line for line in train.stderr.splitlines() if " 40 rows in " in line] and "\r" not in train.stderr
    assert len([line for line in train.stderr.splitlines() if " 40 rows in " in line]) == 2
    log = (tmp_path / "run" / "logs" / "classifier.log").read_text()
    assert all(line in log for line in train.stdout.splitlines() + train.stderr.splitlines())
    events = check_curves(tmp_path / "run", metrics_by_step(tmp_path / "run" / "metrics.jsonl"), ("loss", "lr"))
    for name in ("f1", "accuracy", "mcc", "score"):
        (event,) = events.Scalars(f"eval/{name}")
        assert event.step == 6 and event.value == pytest.approx(results[name], rel=1e-6), name
    settings = events.Tensors("settings/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "    train_steps: 6\n" in settings and "    assessment_method: 'f1'\n" in settings

    # The saved checkpoint (retention kept it and the stranger: save_checkpoint_num 1), evaluated alone from the save
    # folder, gives the predictions of the run that wrote it.
    checkpoint = tmp_path / "run" / "checkpoints" / "albert_classifier-6.ckpt"
    assert sorted(p.name for p in checkpoint.parent.glob("*.ckpt")) == [checkpoint.name, stranger.name]
    again = ok(run(["run_classifier.py", "--output_dir", str(tmp_path / "again"), "--device_target", "CPU",
                    "--do_train", "false", "--eval_data_file_path", str(mrpc["dev"]), "--assessment_method", "f1",
                    "--save_finetune_checkpoint_path", str(checkpoint.parent)]))
    assert f"warning: skipping {stranger}" in again.stdout and f"with {checkpoint}" in again.stdout
    assert (tmp_path / "again" / "eval" / "predictions.tsv").read_text() == \
        (tmp_path / "run" / "eval" / "predictions.tsv").read_text()
    assert f"with {checkpoint}" in (tmp_path / "again" / "logs" / "classifier.log").read_text()
    (event,) = tensorboard(tmp_path / "again" / "tensorboard").Scalars("eval/f1")  # the checkpoint's step
    assert event.step == 6 and event.value == pytest.approx(results["f1"], rel=1e-6)


def test_a_classifier_predicting_one_class_is_warned(data, tmp_path):
    """Dev predictions all one class while the labels hold two: one warning line, after the metrics; none when the
    predictions differ, or when the labels themselves are one class."""
    from model_utils.config import Config
    from src.data.pipelines import read_column
    from src.tasks.registry import classification_report

    dev = str(data["mrpc"]["dev"])
    labels = read_column(dev, "label_ids")
    assert set(labels.tolist()) == {0, 1}
    config = Config({"num_class": 2, "assessment_method": "accuracy"})
    for logits, warned in ((np.tile([[0.0, 1.0]], (len(labels), 1)), True),
                           (np.eye(2)[labels] + 0.5 * np.eye(2)[1 - labels], False)):
        lines = []
        results = classification_report(config, [logits.astype(np.float32)], dev, str(tmp_path), True, lines.append)
        warnings = [line for line in lines if line.startswith("warning: ")]
        assert warnings == ([f"warning: all {len(labels)} predictions are '1' while the labels hold 2 classes: the "
                             f"classifier learned only one class (too few steps, a learning rate too low or too "
                             f"high, or imbalanced training data?)"] if warned else []), lines
        assert results["accuracy"] == pytest.approx(np.mean(labels == 1) if warned else 1.0)


def test_race_end_to_end(data, tmp_path):
    race = data["race"]
    ok(finetune("run_race.py", tmp_path, "--train_data_file_path", str(race["train"]),
                "--eval_data_file_path", str(race["dev"]), "--train_batch_size", "4", "--train_steps", "4",
                "--eval_batch_size", "4"))
    results = check_classification_scores(tmp_path / "eval", race_answers("dev"), list("ABCD"),
                                          race_question_ids("dev"))  # was: no question ids
    assert results["task"] == "race" and results["examples"] == results["rows"] == 17
    assert results["assessment_method"] == "accuracy"


MNLI_LABELS = ["contradiction", "entailment", "neutral"]


@pytest.fixture(scope="module")
def mnli_run(tmp_path_factory):
    """48 real sentence pairs with MNLI's 3 labels (at max_seq_length 32), memorised and evaluated: the run's
    folder, the labels and the training data."""
    tmp_path = tmp_path_factory.mktemp("mnli_run")
    labels = [MNLI_LABELS[i % 3] for i in range(48)]
    train = make_glue_like(tmp_path, "mnli", labels)
    ok(finetune("run_classifier.py", tmp_path / "out", "--train_data_file_path", str(train), "--eval_data_file_path",
                str(train), "--num_class", "3", "--assessment_method", "macro_f1", "--train_batch_size", "8",
                "--epoch_num", "30", "--optimizer_cfg.AdamWeightDecay.learning_rate", "3e-4", *NO_DROPOUT))
    return tmp_path / "out", labels, train


def test_three_class_mnli_end_to_end(mnli_run):
    """3 labels (MNLI's), 48 real sentence pairs memorised and evaluated: macro F1 and the multi-class Matthews
    correlation as scikit-learn computes them. Every class is among the labels (there sklearn's macro F1, over
    the classes of labels and predictions, and ours, over the classes of the labels, agree by definition)."""
    out, labels, _ = mnli_run
    results = check_classification_scores(out / "eval", labels, MNLI_LABELS, [f"train-{i}" for i in range(48)])
    assert results["task"] == "mnli" and "f1" not in results  # binary F1 does not apply to 3 classes
    predicted = [row[1] for row in tsv_rows(out / "eval" / "predictions.tsv")]
    # Learned (chance is 1/3; seen 0.875 with all three classes predicted), so the metrics are not degenerate.
    assert len(set(predicted)) >= 2 and results["accuracy"] >= 0.6, results


def newest_checkpoint(out: Path) -> Path:
    return max((out / "checkpoints").glob("albert_classifier-*.ckpt"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))


def test_the_checkpoint_records_its_datas_task_and_predict_answers_with_it(mnli_run):
    """The run's checkpoints record the task of its data (task_name, label_list, max_seq_length), and src.predict
    on the .ckpt answers a training pair with MNLI's label names at the data's 32 tokens, as the run's own evaluation
    did (was: labels "0", "1", "2", which a user maps to names in HF's MNLI order or another, at 128 tokens)."""
    from src.common.checkpoint_io import read_checkpoint

    out, _, train = mnli_run
    checkpoint = newest_checkpoint(out)
    assert json.loads(str(read_checkpoint(str(checkpoint))["run_task"])) == {
        "task_name": "mnli", "label_list": MNLI_LABELS, "max_seq_length": 32}
    first = train.with_suffix(".tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")
    done = ok(run(["-m", "src.predict", "--model", str(checkpoint), "--task", "classifier", "--spm_model_file", SPM,
                   "--device_target", "CPU", "--text_a", first[8], "--text_b", first[9]]))
    answer = json.loads(done.stdout)
    assert f"{checkpoint}: sequence length 32, the max_seq_length of the data it was fine-tuned on" in done.stderr
    evaluated = tsv_rows(out / "eval" / "predictions.tsv")[0]
    assert answer["label"] == evaluated[1] and list(answer["probabilities"]) == MNLI_LABELS
    np.testing.assert_allclose(list(answer["probabilities"].values()), [float(p) for p in evaluated[2:-1]], atol=1e-4)


def test_glues_diagnostic_set_is_predicted_by_an_mnli_checkpoint(mnli_run, tmp_path):
    """AX.tsv (index, sentence1, sentence2; a test split only) made into data with --task_name ax and predicted by
    the MNLI run's checkpoint: MNLI's label names, and for pairs the run evaluated, its answers (was: ax unknown;
    as MNLI a header error; as RTE refused by the MNLI head)."""
    from model_utils.errors import UserError
    from src import create_finetune_data

    out, _, train = mnli_run
    pairs = [line.split("\t")[8:10] for line in train.with_suffix(".tsv").read_text(encoding="utf-8").splitlines()[1:7]]
    ax = tmp_path / "AX.tsv"
    ax.write_text("index\tsentence1\tsentence2\n" + "".join(f"{i}\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs)),
                  encoding="utf-8")
    made = ["--task_name", "ax", "--data_dir", str(tmp_path), "--spm_model_file", SPM, "--max_seq_length", "32"]
    with pytest.raises(UserError, match=r"^ax has no dev split \(only test\); it is GLUE's diagnostic set: predict "
                                        r"it with an MNLI model$"):
        create_finetune_data.main([*made, "--split", "dev", "--output_file", str(tmp_path / "dev.mindrecord")])
    tool("create_finetune_data", [*made, "--split", "test", "--output_file", tmp_path / "ax.mindrecord"])
    ok(finetune("run_classifier.py", tmp_path / "run", "--do_train", "false", "--do_eval", "false", "--do_predict",
                "true", "--load_finetune_checkpoint_path", str(newest_checkpoint(out)), "--num_class", "3",
                "--predict_data_file_path", str(tmp_path / "ax.mindrecord")))
    header, *rows = [line.split("\t") for line in (tmp_path / "run" / "predict" / "predictions.tsv").read_text()
                     .splitlines()]
    assert header == ["row", "prediction", *(f"p_{name}" for name in MNLI_LABELS), "id"]
    evaluated = tsv_rows(out / "eval" / "predictions.tsv")[:6]
    assert [row[1] for row in rows] == [row[1] for row in evaluated]
    np.testing.assert_allclose([[float(p) for p in row[2:-1]] for row in rows],
                               [[float(p) for p in row[2:-1]] for row in evaluated], atol=1e-5)


def test_a_run_refuses_another_glue_tasks_data_but_takes_mnli_mm_for_mnli():
    """The same GLUE task (MNLI's mismatched sets for an MNLI run) passes; another is one line naming both (was:
    predicted without a word, from the run's training data or a checkpoint's record); data or weights that record
    no task (earlier versions) pass. Pretraining data records no task."""
    from model_utils.errors import UserError
    from src.training.checkpoints import trained_data_task
    from src.training.finetune import check_same_task

    for given, trained in (("mnli-mm", "mnli"), ("mnli", "mnli-mm"), ("cola", None), (None, "mrpc")):
        check_same_task(given, trained, "d.mindrecord", "c.ckpt was fine-tuned on it", "predict")
    with pytest.raises(UserError, match=r"^d.mindrecord is cola data but c.ckpt was fine-tuned on mrpc data: predict "
                                        r"mrpc data$"):
        check_same_task("cola", "mrpc", "d.mindrecord", "c.ckpt was fine-tuned on mrpc data", "predict")
    assert trained_data_task({"kind": "pretraining", "max_seq_length": 128}) == {}
    assert trained_data_task({"kind": "squad", "max_seq_length": 384, "doc_stride": 128}) == {"max_seq_length": 384}


def test_sts_b_regression_end_to_end(tmp_path):
    """num_class 1: the regression head trained on 48 real pairs with scores 0-5 and evaluated on them; Pearson and
    Spearman correlation as scipy.stats computes them from predictions.tsv and the scores written to the tsv."""
    from scipy import stats

    scores = [f"{(i * 37) % 26 / 5:.1f}" for i in range(48)]
    train = make_glue_like(tmp_path, "sts-b", scores)
    ok(finetune("run_classifier.py", tmp_path / "out", "--train_data_file_path", str(train), "--eval_data_file_path",
                str(train), "--num_class", "1", "--assessment_method", "spearman_correlation",
                "--train_batch_size", "8", "--epoch_num", "20", "--optimizer_cfg.AdamWeightDecay.learning_rate",
                "1e-3", *NO_DROPOUT))
    folder = tmp_path / "out" / "eval"
    results = json.loads((folder / "eval_results.json").read_text())
    header, *rows = [line.split("\t") for line in (folder / "predictions.tsv").read_text().splitlines()]
    assert header == ["row", "prediction", "id"] and [int(row[0]) for row in rows] == list(range(48))
    truth, predicted = np.array(scores, dtype=np.float64), np.array([float(row[1]) for row in rows])
    assert predicted.std() > 0.1  # the head learned to spread its outputs: correlations are meaningful
    # predictions.tsv holds 6 decimals; the run scored the unrounded values.
    assert results["pearson_correlation"] == pytest.approx(stats.pearsonr(truth, predicted)[0], abs=1e-5)
    assert results["spearman_correlation"] == pytest.approx(stats.spearmanr(truth, predicted)[0], abs=1e-5)
    assert results["score"] == results["spearman_correlation"] and results["examples"] == 48
    assert results["task"] == "sts-b" and results["pearson_correlation"] > 0.8, results  # seen: 0.98
    # served: the regression's value, at the data's recorded length (the record has no label names)
    done = ok(run(["-m", "src.predict", "--model", str(newest_checkpoint(tmp_path / "out")), "--task", "classifier",
                   "--spm_model_file", SPM, "--device_target", "CPU", "--text_a", "A cat sat.", "--text_b", "A cat."]))
    assert set(json.loads(done.stdout)) == {"prediction"} and ", seq 32, " in done.stderr


def squad_cli(version: str, dev_json, folder, *extra: str) -> dict:
    args = ["-m", "src.squad_postprocess", "--version", version, "--data_file", str(dev_json),
            "--pred_file", str(folder / "predictions.json"), *extra]
    return json.loads(ok(run(args)).stdout)


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_squad_end_to_end(data, tmp_path, version):
    squad = data["squad1" if version == "1.1" else "squad2"]
    script = "run_squad_v1.py" if version == "1.1" else "run_squad_v2.py"
    ok(finetune(script, tmp_path, "--train_data_file_path", str(squad["train"]), "--eval_data_file_path",
                str(squad["dev"]), "--eval_json_path", str(squad["dev_json"]), "--train_batch_size", "8",
                "--train_steps", "120", "--optimizer_cfg.AdamWeightDecay.learning_rate", "5e-4"))
    curve = losses(tmp_path)  # means over 5 steps each
    assert np.mean(curve[-4:]) < 0.7 * np.mean(curve[:2]), curve
    folder = tmp_path / "eval"
    questions = [qa["id"] for article in json.loads(squad["dev_json"].read_text())["data"]
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    predictions = json.loads((folder / "predictions.json").read_text())
    nbest = json.loads((folder / "nbest_predictions.json").read_text())
    assert sorted(predictions) == sorted(questions) == sorted(nbest)
    contexts = {qa["id"]: paragraph["context"] for article in json.loads(squad["dev_json"].read_text())["data"]
                for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    assert all(text in contexts[qid] for qid, text in predictions.items())
    results = json.loads((folder / "eval_results.json").read_text())
    if version == "1.1":
        assert squad_cli("1.1", squad["dev_json"], folder) == {k: results[k] for k in ("exact_match", "f1")}
    else:
        null_odds = json.loads((folder / "null_odds.json").read_text())
        assert sorted(null_odds) == sorted(questions)
        official = squad_cli("2.0", squad["dev_json"], folder, "--na_prob_file", str(folder / "null_odds.json"),
                             "--na_prob_thresh", "0.0")
        assert official == {k: results[k] for k in official}
        assert {"best_f1", "best_f1_thresh", "HasAns_total", "NoAns_total"} <= set(results)


def test_finetuning_starts_from_a_pretrained_checkpoint_with_only_the_head_new(data, tmp_path):
    """The network comes from the json written beside the checkpoint (as src.convert_checkpoint writes it)."""
    import mindspore as ms

    from src.common.checkpoint_io import save_checkpoint_atomic
    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertPreTraining

    config = AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    network = AlbertPreTraining(config)
    save_checkpoint_atomic(network, str(tmp_path / "pretrained.ckpt"))
    config.to_json_file(str(tmp_path / "pretrained.ckpt.json"))
    mrpc = data["mrpc"]
    args = ["run_classifier.py", "--output_dir", str(tmp_path / "out"), "--device_target", "CPU",
            "--train_data_file_path", str(mrpc["train"]), "--eval_data_file_path", str(mrpc["dev"]),
            "--train_batch_size", "8", "--train_steps", "2", "--assessment_method", "f1",
            "--load_pretrain_checkpoint_path", str(tmp_path / "pretrained.ckpt")]
    result = ok(run(args))
    assert "new head: classifier.weight, classifier.bias" in result.stdout
    saved = json.loads((tmp_path / "out" / "checkpoints" / "albert_config.json").read_text())
    assert saved["hidden_size"] == 32 and saved["num_hidden_layers"] == 2
    # that run's fine-tuned checkpoint as the start of another: its head is taken too, and said (was: unsaid)
    tuned = tmp_path / "out" / "checkpoints" / "albert_classifier-2.ckpt"
    again = ok(run(args[:args.index("--load_pretrain_checkpoint_path")] + [
        "--load_pretrain_checkpoint_path", str(tuned), "--output_dir", str(tmp_path / "again"), "--do_eval", "false"]))
    assert f"initialised the network from {tuned} (weights only: training starts at step 0; the task head too: it " \
           f"holds one (fine-tuned already))" in again.stdout

    # Without a backbone weight the run stops before training, naming it.
    values = {p.name: p for p in network.get_parameters() if "pooler" not in p.name}
    save_checkpoint_atomic([{"name": name, "data": p} for name, p in values.items()], str(tmp_path / "broken.ckpt"))
    config.to_json_file(str(tmp_path / "broken.ckpt.json"))
    args[args.index(str(tmp_path / "pretrained.ckpt"))] = str(tmp_path / "broken.ckpt")
    args[args.index(str(tmp_path / "out"))] = str(tmp_path / "out2")
    result = run(args)
    assert result.returncode == 2 and "albert.pooler" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "out2").glob("**/*.ckpt"))


def test_bad_input_is_a_one_line_error(data, tmp_path, monkeypatch, capsys):
    """Each case through the entry point's `run_cli(main, argv)` in this process (one MindSpore start-up for all of
    them, not one per case; the device setup is taken as done, since a started runtime cannot be set up again): exit
    code 2, the message, no traceback and no checkpoint. The same commands as subprocesses, device setup included,
    are the `process=True` rows of tests/test_bad_input_matrix.py (run_classifier.py and run_squad_v1.py among them)."""
    import importlib

    import src.devices.device_setup
    from model_utils.errors import run_cli

    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    mrpc, squad = data["mrpc"], data["squad1"]
    base = ["--output_dir", str(tmp_path / "out"), "--device_target", "CPU"]
    squad_eval = ["run_squad_v1.py", *base, "--do_train", "false", "--eval_data_file_path", str(squad["dev"])]
    cases = [
        (["run_classifier.py", *base, "--do_train", "false", "--do_eval", "false"], "nothing to do"),
        (["run_classifier.py", *base, "--train_data_file_path", str(mrpc["train"]), "--do_eval", "false",
          "--num_class", "3"], "has 2 label(s)"),
        (["run_classifier.py", *base, "--do_train", "false", "--eval_data_file_path", str(mrpc["dev"])],
         "needs --load_finetune_checkpoint_path"),
        (["run_classifier.py", *base, "--train_data_file_path", str(tmp_path / "missing.mindrecord")],
         "data not found"),
        (["run_classifier.py", *base, "--train_data_file_path", str(squad["train"])], "columns"),
        (["run_classifier.py", *base, "--train_data_file_path", str(mrpc["train"]),
          "--eval_data_file_path", str(mrpc["dev"]), "--assessment_method", "spearman_correlation"],
         "does not fit classification"),
        (squad_eval, "eval_json_path is not set"),
        (squad_eval + ["--eval_json_path", str(tmp_path / "missing.json")], "eval_json_path not found"),
        (squad_eval + ["--eval_json_path", str(data["squad2"]["dev_json"])], "made from another SQuAD file"),
        (["run_squad_v1.py", *base, "--do_train", "false", "--eval_data_file_path", str(squad["train"]),
          "--eval_json_path", str(squad["dev_json"])], "unique_ids"),
        (["run_classifier.py", *base, "--train_data_file_path", str(mrpc["train"]), "--train_batch_sizee", "8"],
         "train_batch_size"),
        (["run_classifier.py", *base, "--train_data_file_path", str(mrpc["train"]), "--train_batch_size", "60000",
          "--do_eval", "false"], "fewer than train_batch_size x device count = 60000 x 1: lower train_batch_size"),
        (["run_classifier.py", *base, "--train_data_file_path", str(mrpc["train"]), "--train_batch_size", "100000"],
         "key 'train_batch_size' must be in [1, 65536], got 100000"),
    ]
    for args, message in cases:
        code = run_cli(importlib.import_module(args[0].removesuffix(".py")).main, args[1:])
        stderr = capsys.readouterr().err
        assert code == 2, (args, stderr[-1500:])
        assert message in stderr and "Traceback" not in stderr, (args, stderr[-1500:])
    assert not (tmp_path / "out" / "checkpoints").exists() or not list((tmp_path / "out").glob("**/*.ckpt"))


def test_a_checkpoint_with_another_head_size_is_an_error(cola_run, tmp_path):
    """A CoLA-trained (2-class) checkpoint cannot be evaluated as a 3-class MNLI classifier: refused as CoLA's by the
    task it records, and, as a checkpoint of an earlier version that records none, by its head's shape."""
    import shutil

    from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic

    folder = tmp_path / "mnli"
    folder.mkdir()
    tool("create_finetune_data", ["--task_name", "mnli", "--data_dir", ASSETS / "glue" / "hf_dummy" / "mnli" / "MNLI",
                                  "--split", "dev", "--output_file", folder / "dev.mindrecord",
                                  "--spm_model_file", ASSETS / "tokenizer" / "albert_30k-clean.model",
                                  "--max_seq_length", "32"])
    (checkpoint,) = (cola_run[0] / "checkpoints").glob("albert_classifier-*.ckpt")  # the CoLA run's (2 classes)
    older = tmp_path / "older" / checkpoint.name
    older.parent.mkdir()
    values = {name: value for name, value in read_checkpoint(str(checkpoint)).items() if name != "run_task"}
    strings = {name: value for name, value in values.items() if isinstance(value, str)}  # run_id, run_kind, ...
    save_checkpoint_atomic([{"name": name, "data": value} for name, value in values.items() if name not in strings],
                           str(older), append_dict=strings)
    shutil.copy(checkpoint.parent / "albert_config.json", older.parent / "albert_config.json")
    for given, expected in ((checkpoint, [f"is mnli data but {checkpoint} was fine-tuned on cola data: evaluate on the "
                                          f"cola dev split"]), (older, ["classifier.weight", "(2, 32)"])):
        result = run(["run_classifier.py", "--output_dir", str(tmp_path / "out"), "--device_target", "CPU",
                      "--do_train", "false", "--eval_data_file_path", str(folder / "dev.mindrecord"), "--num_class",
                      "3", "--load_finetune_checkpoint_path", str(given)])
        assert result.returncode == 2 and all(part in result.stderr for part in expected), result.stderr[-1500:]
        assert not (tmp_path / "out" / "eval").exists()
