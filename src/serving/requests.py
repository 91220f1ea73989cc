"""Serving requests: the tokenizer they are read with, one request from the flags or a JSON-lines file of them,
checked (keys, types, sizes) and streamed so that memory does not grow with the file."""
import argparse
import difflib
import hashlib
import json
import sys
from typing import Dict, Iterator, Optional, Sequence, Tuple

from model_utils import json_input
from model_utils.errors import UserError, utf16_hint
from src.serving.engines import check_vocabulary

# The keys of a request in --input_file, per task, besides an optional `id`; the classifier's `text_b` is optional.
REQUEST_KEYS = {"classifier": ("text_a", "text_b"), "race": ("article", "question", "options"),
                "squad_v1": ("question", "context"), "squad_v2": ("question", "context")}
GOLD_KEYS = ("label", "gold")  # a request's known answer, for the accuracy line (classifier and race)
SCORED_TASKS = ("classifier", "race")
CHUNK_REQUESTS = 1024  # requests read and made into features at a time: bounds the memory of a large --input_file
MAX_REQUEST_BYTES = 1 << 20  # one line of --input_file (read no further: a line with no end never fills memory)


def load_tokenizer(args: argparse.Namespace, model_vocab: Optional[int]):
    from src.data.tokenization import FullTokenizer

    tokenizer = FullTokenizer(args.vocab_file or None, args.do_lower_case, args.spm_model_file or None)
    check_vocabulary(tokenizer, model_vocab)
    return tokenizer


def check_task_flags(args: argparse.Namespace) -> None:
    """A request flag of another task is refused (as a request's unknown key is), not ignored."""
    foreign = [flag for flag, tasks in TEXT_FLAGS.items() if getattr(args, flag) and args.task not in tasks]
    if foreign:
        raise UserError(f"--{foreign[0]} is not a {args.task} input (a {' or '.join(TEXT_FLAGS[foreign[0]])} one): "
                        f"drop it")


# The request flags and the tasks that read them.
TEXT_FLAGS = {"text_a": ("classifier",), "text_b": ("classifier",), "labels": ("classifier",),
              "article": ("race",), "option": ("race",), "question": ("race", "squad_v1", "squad_v2"),
              "context": ("squad_v1", "squad_v2")}


def blank(text: object) -> bool:
    """Empty or whitespace only: the tokenizer makes no token of it, so the model would answer an empty input."""
    return not text or (isinstance(text, str) and not text.strip())


def _blank_flags(args: argparse.Namespace, flags: Sequence[str]) -> str:
    """' (--context is blank)' when one of `flags` was given as whitespace only, to say why it counts as missing."""
    given = [flag for flag in flags if getattr(args, flag) and blank(getattr(args, flag))]
    return f" (--{given[0]} is blank)" if given else ""


def flag_request(args: argparse.Namespace, choices: int) -> Dict[str, object]:
    """The one request of the text flags; a blank text counts as missing."""
    if args.task == "classifier":
        if blank(args.text_a):
            raise UserError("--task classifier needs --text_a (and --text_b for a sentence-pair task)"
                            + _blank_flags(args, ["text_a"]))
        return {"text_a": args.text_a, "text_b": args.text_b}
    if args.task == "race":
        if blank(args.article) or blank(args.question) or not args.option:
            raise UserError("--task race needs --article, --question and one --option per choice"
                            + _blank_flags(args, ["article", "question"]))
        if len(args.option) != choices:
            raise UserError(f"the model chooses among {choices} options but {len(args.option)} --option were given")
        return {"article": args.article, "question": args.question, "options": list(args.option)}
    if blank(args.question) or blank(args.context):
        raise UserError(f"--task {args.task} needs --question and --context" +
                        _blank_flags(args, ["question", "context"]))
    return {"question": args.question, "context": args.context}


def check_request(request: object, task: str, choices: int, where: str) -> None:
    """A request of --input_file: a JSON object with the task's keys, strings where text goes."""
    if not isinstance(request, dict):
        raise UserError(f"{where}: a request is a JSON object, got {type(request).__name__}")
    known = REQUEST_KEYS[task] + ("id",) + (GOLD_KEYS if task in SCORED_TASKS else ())
    for key in request:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            raise UserError(f"{where}: unknown key '{key}' for {task} (keys: {', '.join(known)})"
                            + (f"; did you mean '{close[0]}'?" if close else ""))
    missing = [key for key in REQUEST_KEYS[task] if key != "text_b" and blank(request.get(key))]
    if missing:
        blanks = [key for key in missing if request.get(key)]
        raise UserError(f"{where}: a {task} request needs {', '.join(missing)}"
                        + (f" ({blanks[0]} is blank)" if blanks else ""))
    if all(key in request for key in GOLD_KEYS):
        raise UserError(f"{where}: give the gold answer once, as label or as gold")
    for key, value in request.items():
        if key == "options":
            if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
                raise UserError(f"{where}: options must be a list of non-empty strings")
            if len(value) != choices:
                raise UserError(f"{where}: the model chooses among {choices} options but {len(value)} were given")
        elif key == "id" or key in GOLD_KEYS:
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise UserError(f"{where}: {key} must be a string or an integer")
        elif not isinstance(value, str) and not (key == "text_b" and value is None):
            raise UserError(f"{where}: {key} must be a string")


def warn_single_sentences(args: argparse.Namespace, total: int, alone: Tuple[int, object]) -> None:
    """A sentence-pair model answers a request without text_b as if it were one sentence, and nothing in the model
    file says which kind it is: say so once, on stderr, instead of answering silently. `alone`: how many of the
    `total` requests have no text_b, and the first one's id."""
    if args.task != "classifier" or not alone[0]:
        return
    from src.data.tsv_tasks import TSV_TASKS

    pairs = ", ".join(name for name, task in TSV_TASKS.items() if task.train_dev.text_b is not None)
    which = (f"{alone[0]} of {total} requests of {args.input_file} have no text_b (the first: id "
             f"{alone[1]})" if args.input_file else "no --text_b")
    print(f"warning: {which}: answered as single sentences; a model fine-tuned on sentence pairs ({pairs}) needs "
          f"text_b", file=sys.stderr)


def read_requests(path: str, task: str, choices: int) -> Iterator[Dict[str, object]]:
    """The requests of a JSON lines file, streamed (blank lines skipped), each checked and given its line number
    as id when it has none. A line over MAX_REQUEST_BYTES and JSON nested too deeply to parse are refused."""
    for number, request in _numbered_requests(path, task, choices):
        yield {"id": number, **request}


def _numbered_requests(path: str, task: str, choices: int) -> Iterator[Tuple[int, Dict[str, object]]]:
    """(line number, checked request as written) of each request line of `path`."""
    with open(path, "rb") as lines:  # decoded line by line, so a bad byte is named with its line
        for number, raw in enumerate(iter(lambda: lines.readline(MAX_REQUEST_BYTES + 1), b""), 1):
            where = f"{path} line {number}"
            if len(raw) > MAX_REQUEST_BYTES:
                raise UserError(f"{where}: a request is longer than {MAX_REQUEST_BYTES} bytes (the cap of one line); "
                                f"split the text")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{where}: not UTF-8 text ({err.reason}){utf16_hint(raw)}") from err
            if not line.strip():
                continue
            try:
                request = json_input.loads(line.rstrip())
            except json.JSONDecodeError as err:
                raise UserError(f"{where}: not JSON ({err.msg} at column {err.colno}){utf16_hint(raw)}; requests "
                                f"are JSON lines, one object per line") from err
            except RecursionError:
                raise UserError(f"{where}: JSON nested too deeply (a request is a flat JSON object)") from None
            check_request(request, task, choices, where)
            yield number, request


def _id_key(request_id: object) -> bytes:
    """A fixed-size key of an id (as JSON, so 3 and "3" differ as they do in the answers file): survey_requests
    keeps one per request, not the id itself, which may be long."""
    return hashlib.blake2b(json.dumps(request_id).encode("utf-8"), digest_size=16).digest()


def _check_unique_id(seen: Dict[bytes, int], number: int, request: Dict[str, object], path: str) -> None:
    """Answers are matched to requests by id: two requests of one id would be answered twice under it."""
    request_id = request.get("id", number)
    first = seen.setdefault(_id_key(request_id), number)
    if first != number:
        implicit = "" if "id" in request else " (its line number: it has no id)"
        shown = json.dumps(request_id, ensure_ascii=False)
        raise UserError(f"{path} line {number}: id {shown}{implicit} is also the id of line {first}: ids must be "
                        f"unique (answers are matched to requests by id)")


def survey_requests(path: str, task: str, choices: int) -> Tuple[int, Tuple[int, object]]:
    """Read every request once before the model is loaded, keeping only a 16-byte key of each id (to refuse a
    repeated id): a bad line stops the run before any work. Returns the number of requests and, for the
    classifier, how many have no text_b and the first one's id."""
    total, alone, first = 0, 0, None
    seen: Dict[bytes, int] = {}
    for number, request in _numbered_requests(path, task, choices):
        _check_unique_id(seen, number, request, path)
        request = {"id": number, **request}
        total += 1
        if task == "classifier" and not request.get("text_b"):
            alone, first = alone + 1, first if alone else request["id"]
    if not total:
        raise UserError(f"{path} holds no request")
    return total, (alone, first)
