"""Serving answers: requests made into features (src/data/features.py) and run, outputs turned into a label, a
choice or SQuAD answers, written one JSON line per request with the accuracy over requests that carry their gold
answer."""
import argparse
import itertools
import json
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, TextIO

import numpy as np

from model_utils.errors import UserError
from src.data.features import (FIRST_UNIQUE_ID, InputExample, RaceExample, SquadExample, SquadOptions, classifier_feature,
                               doc_windows, example_features, example_row, race_feature, tokenize_context)
from src.serving.engines import ModelShape
from src.serving.requests import CHUNK_REQUESTS, GOLD_KEYS

SHOWN_ANSWERS = 5
MAX_WINDOWS = 256  # SQuAD windows one request may make (a 1 MiB context at --doc_stride 1 would make ~250,000)


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def classify(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
             requests: List[Dict[str, object]]) -> List[Dict[str, object]]:

    features = [classifier_feature(InputExample(f"predict-{index}", request["text_a"], request.get("text_b"), None,
                                                "request"), tokenizer, {}, shape.seq)
                for index, request in enumerate(requests)]
    all_logits = run(features)[0].astype(np.float64)
    if all_logits.shape[1] == 1:
        return [{"prediction": float(logits[0])} for logits in all_logits]  # regression (sts-b)
    labels = args.labels.split(",") if args.labels else label_names(shape, all_logits.shape[1])
    if len(labels) != all_logits.shape[1]:
        raise UserError(f"--labels names {len(labels)} labels but the model has {all_logits.shape[1]} classes")
    return [{"label": labels[int(logits.argmax())], "probabilities": dict(zip(labels, _softmax(logits).tolist())),
             "logits": logits.tolist()} for logits in all_logits]


def label_names(shape: ModelShape, classes: int) -> List[str]:
    """The classifier's label names without --labels: those of the data it was fine-tuned on, where its run
    recorded them (was: 0, 1, ..., whatever the data called them: MNLI's order is not HF's), else the label ids."""
    recorded = shape.fine_tuned_on.get("label_list")
    if isinstance(recorded, list) and len(recorded) == classes:
        return [str(label) for label in recorded]
    return [str(i) for i in range(classes)]


def choose(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
           requests: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """RACE: the option the model scores highest for the article and question."""

    features = [race_feature(RaceExample(f"predict-{index}", request["article"], request["question"],
                                         list(request["options"]), "A", "request"),
                             tokenizer, shape.seq, args.max_qa_length) for index, request in enumerate(requests)]
    letters = [chr(ord("A") + index) for index in range(shape.choices)]
    answers = []
    for request, logits in zip(requests, run(features)[0].astype(np.float64)):
        best = int(logits.argmax())
        answers.append({"answer": letters[best], "option": request["options"][best],
                        "probabilities": dict(zip(letters, _softmax(logits).tolist())), "logits": logits.tolist()})
    return answers


def answer(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
           requests: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """SQuAD: the answer span (v2: or no answer) found in the context, windows as evaluation makes them."""
    from src.tasks.squad_answers import predictions_v1, predictions_v2, results_from_outputs

    options = SquadOptions(shape.seq, args.doc_stride, args.max_query_length, is_training=False)
    options.check()
    examples, rows, features, windows = [], [], {}, []
    for index, request in enumerate(requests):
        example = SquadExample(f"predict-{index}", request["question"], request["context"], answers=[])
        examples.append(example_row(index, example))
        context = tokenize_context(tokenizer, example.context)
        check_windows(args, tokenizer, options, request, len(context.ids))
        made = list(example_features(example, index, tokenizer, options, context))
        for record, feature in made:
            unique_id = FIRST_UNIQUE_ID + len(rows)
            rows.append(record)
            features[unique_id] = dict(unique_id=unique_id, **feature)
        windows.append(len(made))
    outputs = run(rows)
    results = results_from_outputs(list(features), outputs)
    null_odds = {}
    if args.task == "squad_v1":
        predictions, nbest = predictions_v1(examples, features, results, args.n_best_size, args.max_answer_length)
    else:
        start_n_top = outputs[0].shape[1]
        predictions, nbest, null_odds = predictions_v2(
            examples, features, results, args.n_best_size, args.max_answer_length, start_n_top,
            outputs[2].shape[1] // start_n_top, args.null_score_diff_threshold)
    answers = []
    for example, count in zip(examples, windows):
        qas_id = example["qas_id"]
        shown = [{"text": entry["text"], "probability": entry["probability"]}
                 for entry in nbest[qas_id][:SHOWN_ANSWERS]]
        extra = {"null_score": null_odds[qas_id]} if qas_id in null_odds else {}
        answers.append({"answer": predictions[qas_id], **extra, "nbest": shown, "windows": count})
    return answers


def check_windows(args: argparse.Namespace, tokenizer, options, request: Dict[str, object], tokens: int) -> None:
    """A context longer than --max_windows windows is refused before its features are made (their memory and the
    model's time grow with the windows)."""

    query = len(tokenizer.encode(request["question"])[:options.max_query_length])
    count = len(doc_windows(tokens, options.max_seq_length - query - 3, options.doc_stride))
    if count > args.max_windows:
        which = f"request {request['id']}" if "id" in request else "--context"
        raise UserError(f"{which}: its context ({tokens} tokens) makes {count} windows of "
                        f"{options.max_seq_length} tokens at --doc_stride {options.doc_stride}, more than "
                        f"--max_windows {args.max_windows}: split the context, or raise --max_windows")


ANSWERS = {"classifier": classify, "race": choose, "squad_v1": answer, "squad_v2": answer}


@dataclass
class Accuracy:
    """The answers to requests that carry their gold answer (GOLD_KEYS: a label name or index; RACE: a letter or
    index), scored as they are written."""
    correct: int = 0
    scored: int = 0
    foreign: int = 0  # gold answers that are none of the model's labels (scored as wrong)
    example: str = ""  # the first of them, with the model's labels
    unscored: int = 0  # gold values given to a regression model: echoed, not scored

    def add(self, gold: object, result: Dict[str, object]) -> None:
        predicted = result.get("label", result.get("answer"))
        if predicted is None:  # a regression's value
            self.unscored += 1
            return
        names = list(result["probabilities"])
        wanted = names[gold] if isinstance(gold, int) and 0 <= gold < len(names) else str(gold)
        if wanted not in names:
            self.foreign += 1
            self.example = self.example or f"{gold!r}; the model's: {', '.join(names)}"
        self.scored += 1
        self.correct += wanted == predicted

    def lines(self, path: str) -> List[str]:
        found = [f"accuracy {self.correct / self.scored:.4f}: {self.correct} of the {self.scored} requests of {path} "
                 f"with a gold answer"] if self.scored else []
        if self.foreign:
            found.append(f"warning: {self.foreign} gold answer(s) are none of the model's labels (first: "
                         f"{self.example}): scored as wrong; --labels names the labels in label-id order")
        if self.unscored:
            found.append(f"note: {self.unscored} gold value(s) given to a regression model: echoed, not scored")
        return found


def write_answers(answer_requests: Callable[[List[Dict[str, object]]], List[Dict[str, object]]],
                  requests: Iterable[Dict[str, object]], out: TextIO, accuracy: Accuracy) -> None:
    """One JSON line per request, with its id (and its gold answer, scored into `accuracy`), CHUNK_REQUESTS requests
    read and made into features at a time."""
    requests = iter(requests)
    while True:
        chunk = list(itertools.islice(requests, CHUNK_REQUESTS))
        if not chunk:
            return
        for request, result in zip(chunk, answer_requests(chunk)):
            gold = next((request[key] for key in GOLD_KEYS if key in request), None)
            if gold is not None:
                accuracy.add(gold, result)
            echoed = {} if gold is None else {"gold": gold}
            out.write(json.dumps({"id": request["id"], **result, **echoed}, ensure_ascii=False, default=float) + "\n")
