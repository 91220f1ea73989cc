"""Run a model exported by export.py (MINDIR or ONNX) on raw text: a sentence (pair) label, a RACE choice, or a
SQuAD answer.

    python -m src.predict --model out/albert_mrpc.mindir --task classifier --spm_model_file 30k-clean.model \
        --text_a "The cat sat." --text_b "A cat was sitting." [--labels not_equivalent,equivalent]
    python -m src.predict --model out/albert_race.mindir --task race --spm_model_file 30k-clean.model \
        --article "..." --question "The writer thinks _ ." --option "..." --option "..." --option "..." --option "..."
    python -m src.predict --model out/albert_squad_v1.onnx --task squad_v1 --spm_model_file 30k-clean.model \
        --question "Who wrote it?" --context "It was written by ..."

The file's suffix picks the engine. A .mindir runs on MindSpore (ms.load + nn.GraphCell, the portable path: any
MindSpore loads it). A .onnx (export.py --file_format ONNX) runs on ONNX Runtime (ORT_ENABLE_ALL, CPU; needs
`pip install onnxruntime onnx`, not part of requirements.txt): the same network in another engine, which on CPU
serves it faster and in a fraction of the memory, since the process never imports MindSpore.

Text becomes features exactly as the data tools make them (create_finetune_data.classifier_feature and
race_feature, create_squad_data.example_features) at the sequence length the model was exported with; the task's
inputs come from the task registry (src/tasks.py); SQuAD answers come from
squad_get_predictions, as in evaluation. Prints one JSON object on stdout.
"""
import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.config import ArgumentParser, boolean
from model_utils.errors import UserError, run_cli
from src.inference import Runner, cell_runner, real_rows, run_padded
from src.tasks import TASKS

# Feature key of the data tools (the task's head_inputs) -> the exported input's name (the head's argument).
EXPORT_NAMES = {"input_ids": "input_ids", "segment_ids": "token_type_ids", "input_mask": "input_mask",
                "p_mask": "p_mask"}
QAS_ID = "predict-0"
SHOWN_ANSWERS = 5
SUFFIXES = (".mindir", ".onnx")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="MINDIR (MindSpore) or ONNX (ONNX Runtime) file of export.py")
    parser.add_argument("--task", required=True, choices=list(TASKS))
    parser.add_argument("--spm_model_file", default="", help="SentencePiece model the model was fine-tuned with")
    parser.add_argument("--vocab_file", default="", help="WordPiece vocab.txt (albert_zh) instead of a SentencePiece model")
    parser.add_argument("--do_lower_case", type=boolean, default=True, help="true or false")
    parser.add_argument("--text_a", default=None, help="classifier: the sentence (first of the pair)")
    parser.add_argument("--text_b", default=None, help="classifier: the second sentence of a pair task")
    parser.add_argument("--labels", default="", help="classifier: comma-separated label names in label-id order")
    parser.add_argument("--article", default=None, help="RACE: the passage")
    parser.add_argument("--option", action="append", default=[], help="RACE: one answer option (repeat per choice)")
    parser.add_argument("--max_qa_length", type=int, default=128, help="RACE: as create_finetune_data")
    parser.add_argument("--question", default=None, help="SQuAD and RACE: the question")
    parser.add_argument("--context", default=None, help="SQuAD: the paragraph to find the answer in")
    parser.add_argument("--doc_stride", type=int, default=128, help="SQuAD: as create_squad_data")
    parser.add_argument("--max_query_length", type=int, default=64, help="SQuAD: as create_squad_data")
    parser.add_argument("--n_best_size", type=int, default=20)
    parser.add_argument("--max_answer_length", type=int, default=30)
    parser.add_argument("--null_score_diff_threshold", type=float, default=0.0, help="squad_v2: answer '' above it")
    parser.add_argument("--device_target", default="auto", choices=("auto", "CPU", "GPU", "Ascend"),
                        help="MINDIR: where MindSpore runs it (ONNX runs on ONNX Runtime's CPU provider)")
    parser.add_argument("--threads", type=int, default=0, help="ONNX: intra-op threads (0: ONNX Runtime's default)")
    return parser.parse_args(list(argv))


def model_signature(path: str) -> Tuple[List[Tuple[str, List[int]]], Optional[int]]:
    """(input name, shape) of each graph input (batch -1 when exported with a dynamic batch) and the model's
    vocabulary size, read from the MINDIR or ONNX file so features can be made at the exported sequence length."""
    if path.endswith(".onnx"):
        return _onnx_signature(path)
    from mindspore.train.mind_ir_pb2 import ModelProto

    proto = ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as err:  # protobuf's DecodeError: not a MINDIR, or an encrypted one
        raise UserError(f"{path} is not a readable MINDIR model ({type(err).__name__})") from err
    inputs = [(item.name.split(":")[-1], list(item.tensor[0].dims)) for item in proto.graph.input if item.tensor]
    vocab = [p.dims[0] for p in proto.graph.parameter if p.name.endswith("word_embeddings.embedding_table")]
    return inputs, (int(vocab[0]) if vocab else None)


def _onnx_signature(path: str) -> Tuple[List[Tuple[str, List[int]]], Optional[int]]:
    import onnx

    try:
        graph = onnx.load_model(path, load_external_data=False).graph
    except Exception as err:  # protobuf's DecodeError
        raise UserError(f"{path} is not a readable ONNX model ({type(err).__name__})") from err
    inputs = [(item.name, [dim.dim_value or -1 for dim in item.type.tensor_type.shape.dim]) for item in graph.input]
    vocab = [p.dims[0] for p in graph.initializer if p.name.endswith("word_embeddings.embedding_table")]
    return inputs, (int(vocab[0]) if vocab else None)


def check_model(path: str, task: str, inputs: List[Tuple[str, List[int]]]) -> None:
    wanted = [EXPORT_NAMES[column] for column in TASKS[task].head_inputs]
    rank = 3 if TASKS[task].choices else 2
    names = [name for name, _ in inputs]
    if names != wanted or any(len(shape) != rank for _, shape in inputs):
        found = ", ".join(f"{name} {shape}" for name, shape in inputs)
        layout = "[batch, choices, seq]" if rank == 3 else "[batch, seq]"
        raise UserError(f"{path} takes ({found}), not the {layout} inputs ({', '.join(wanted)}) of a {task} "
                        f"model exported by export.py")


def load_tokenizer(args: argparse.Namespace, model_vocab: Optional[int]):
    from src.tokenization import FullTokenizer

    tokenizer = FullTokenizer(args.vocab_file or None, args.do_lower_case, args.spm_model_file or None)
    if model_vocab is not None and tokenizer.vocab_size > model_vocab:
        raise UserError(f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary has "
                        f"{model_vocab}: use the tokenizer the model was trained with")
    return tokenizer


def mindspore_runner(path: str, device_target: str) -> Runner:
    """ms.load + nn.GraphCell: the portable path."""
    import mindspore as ms
    from mindspore import nn

    from src.device_setup import setup_device

    setup_device(device_target)
    return cell_runner(nn.GraphCell(ms.load(path)))


def onnxruntime_runner(path: str, threads: int) -> Runner:
    """An ONNX Runtime session (CPU, ORT_ENABLE_ALL); inputs in the graph's order."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [item.name for item in session.get_inputs()]

    def run(arrays: List[np.ndarray]) -> List[np.ndarray]:
        return session.run(None, dict(zip(names, arrays)))
    return run


def load_runner(args: argparse.Namespace) -> Runner:
    if args.model.endswith(".onnx"):
        return onnxruntime_runner(args.model, args.threads)
    return mindspore_runner(args.model, args.device_target)


def run_rows(run: Runner, rows: List[Dict[str, np.ndarray]], columns: Sequence[str], batch: int) -> List[np.ndarray]:
    """The model's outputs for feature rows, in batches of the exported size (the last one padded with zero rows)."""
    size = batch if batch > 0 else len(rows)
    batches = ([np.stack([row[column] for row in rows[start:start + size]]).astype(np.int32) for column in columns]
               for start in range(0, len(rows), size))
    return real_rows(run_padded(run, batches, size))


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def choose(args: argparse.Namespace, tokenizer, run, seq: int, choices: int) -> Dict[str, object]:
    """RACE: the option the model scores highest for the article and question."""
    from src.create_finetune_data import RaceExample, race_feature

    if not args.article or not args.question or not args.option:
        raise UserError("--task race needs --article, --question and one --option per choice")
    if len(args.option) != choices:
        raise UserError(f"the model chooses among {choices} options but {len(args.option)} --option were given")
    example = RaceExample(QAS_ID, args.article, args.question, list(args.option), "A", "command line")
    logits = run([race_feature(example, tokenizer, seq, args.max_qa_length)])[0][0].astype(np.float64)
    probabilities = _softmax(logits)
    letters = [chr(ord("A") + index) for index in range(choices)]
    best = int(logits.argmax())
    return {"answer": letters[best], "option": args.option[best],
            "probabilities": dict(zip(letters, probabilities.tolist())), "logits": logits.tolist()}


def classify(args: argparse.Namespace, tokenizer, run, seq: int) -> Dict[str, object]:
    from src.create_finetune_data import InputExample, classifier_feature

    if not args.text_a:
        raise UserError("--task classifier needs --text_a (and --text_b for a sentence-pair task)")
    example = InputExample("predict-0", args.text_a, args.text_b, None, "command line")
    logits = run([classifier_feature(example, tokenizer, {}, seq)])[0][0].astype(np.float64)
    if logits.size == 1:
        return {"prediction": float(logits[0])}  # regression (sts-b)
    labels = args.labels.split(",") if args.labels else [str(i) for i in range(logits.size)]
    if len(labels) != logits.size:
        raise UserError(f"--labels names {len(labels)} labels but the model has {logits.size} classes")
    probabilities = _softmax(logits)
    return {"label": labels[int(logits.argmax())], "probabilities": dict(zip(labels, probabilities.tolist())),
            "logits": logits.tolist()}


def answer(args: argparse.Namespace, tokenizer, run, seq: int) -> Dict[str, object]:
    from src.create_squad_data import FIRST_UNIQUE_ID, SquadExample, SquadOptions, example_features, example_row
    from src.squad_get_predictions import predictions_v1, predictions_v2, results_from_outputs

    if not args.question or not args.context:
        raise UserError(f"--task {args.task} needs --question and --context")
    options = SquadOptions(seq, args.doc_stride, args.max_query_length, is_training=False)
    options.check()
    example = SquadExample(QAS_ID, args.question, args.context, answers=[])
    rows, features = [], {}
    for index, (record, feature) in enumerate(example_features(example, 0, tokenizer, options)):
        rows.append(record)
        features[FIRST_UNIQUE_ID + index] = dict(unique_id=FIRST_UNIQUE_ID + index, **feature)
    outputs = run(rows)
    examples = [example_row(0, example)]
    results = results_from_outputs(list(features), outputs)
    if args.task == "squad_v1":
        predictions, nbest = predictions_v1(examples, features, results, args.n_best_size, args.max_answer_length)
        extra = {}
    else:
        start_n_top = outputs[0].shape[1]
        predictions, nbest, null_odds = predictions_v2(
            examples, features, results, args.n_best_size, args.max_answer_length, start_n_top,
            outputs[2].shape[1] // start_n_top, args.null_score_diff_threshold)
        extra = {"null_score": null_odds[QAS_ID]}
    shown = [{"text": entry["text"], "probability": entry["probability"]} for entry in nbest[QAS_ID][:SHOWN_ANSWERS]]
    return {"answer": predictions[QAS_ID], **extra, "nbest": shown, "windows": len(rows)}


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    if not Path(args.model).is_file():
        raise UserError(f"model not found: {args.model}")
    if not args.model.endswith(SUFFIXES):
        raise UserError(f"--model must be a .mindir (MindSpore) or .onnx (ONNX Runtime) file written by export.py: "
                        f"{args.model}")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0, got {args.threads}")
    if args.model.endswith(".onnx"):
        missing = [name for name in ("onnxruntime", "onnx") if importlib.util.find_spec(name) is None]
        if missing:
            raise UserError(f"an ONNX model runs on ONNX Runtime: pip install {' '.join(missing)}")
    inputs, model_vocab = model_signature(args.model)
    check_model(args.model, args.task, inputs)
    tokenizer = load_tokenizer(args, model_vocab)
    if args.max_qa_length < 1:
        raise UserError(f"--max_qa_length must be >= 1, got {args.max_qa_length}")
    runner = load_runner(args)
    shape = inputs[0][1]
    batch, seq = shape[0], shape[-1]

    def run(rows: List[Dict[str, np.ndarray]]) -> List[np.ndarray]:
        return run_rows(runner, rows, TASKS[args.task].head_inputs, batch)

    if args.task == "classifier":
        result = classify(args, tokenizer, run, seq)
    elif args.task == "race":
        result = choose(args, tokenizer, run, seq, shape[1])
    else:
        result = answer(args, tokenizer, run, seq)
    print(json.dumps(result, ensure_ascii=False, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
