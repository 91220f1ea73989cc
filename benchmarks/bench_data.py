"""Data pipeline throughput: pretraining data creation (1 and 2 workers) and MindRecord reading.

    python benchmarks/bench_data.py [--corpus FILE] [--repeat 3] [--spm_model_file MODEL] [--dupe_factor 5]
                                    [--json_out F]

Reports, for pretraining data creation, documents/s, instances/s and MB/s of input text for tokenization alone
and for the whole creation (tokenize + pair + mask + write), so one sees how much of the time tokenization
takes; and rows/s of the dataset readers (dataset.py pipelines iterated to the end). Defaults use the test
assets in ../shared/assets; any one-sentence-per-line corpus and SentencePiece model work.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dataset  # noqa: E402
from src import create_finetune_data as cfd  # noqa: E402
from src import create_pretraining_data as cpd  # noqa: E402
from src import create_squad_data as csd  # noqa: E402
from src.tokenization import FullTokenizer  # noqa: E402

ASSETS = ROOT.parent / "shared" / "assets"


def _time(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _rate_row(stage: str, workers: int, seconds: float, documents: int, instances, megabytes: float) -> dict:
    return {"stage": stage, "workers": workers, "seconds": seconds, "documents/s": documents / seconds,
            "instances/s": instances / seconds if instances else None, "MB/s": megabytes / seconds}


def bench_creation(corpus: Path, spm: str, dupe_factor: int, max_seq_length: int, workdir: Path) -> list:
    """Tokenization alone, instance creation (tokenize + pair + mask) and the whole tool (+ MindRecord write),
    with 1 and 2 workers."""
    tokenizer = FullTokenizer(None, True, spm)
    documents = cpd.read_documents([corpus])
    megabytes = corpus.stat().st_size / 1e6
    _, seconds = _time(lambda: [tokenizer.encode(s) for d in documents for s in d.sentences])
    rows = [_rate_row("tokenize only", 1, seconds, len(documents), None, megabytes)]
    options = cpd.MaskingOptions(max_seq_length=max_seq_length)
    for workers in (1, 2):
        (arrays, _), seconds = _time(lambda: cpd.make_instances(documents, tokenizer, options, dupe_factor, 1,
                                                                workers))
        rows.append(_rate_row("instances", workers, seconds, len(documents), len(arrays["input_ids"]), megabytes))
    # The tool as users run it (its own process: MindSpore is loaded only to write, so worker processes fork
    # cheaply and, with several output shards, write them in parallel). Includes interpreter and MindSpore
    # start-up, measured alone in the first row.
    _, startup = _time(lambda: subprocess.run([sys.executable, "-c", "import mindspore.mindrecord"], check=True))
    rows.append(_rate_row("start-up only", 1, startup, len(documents), None, megabytes))
    for workers in (1, 2):
        argv = ["--input_file", str(corpus), "--output_file", str(workdir / f"pt{workers}.mindrecord"),
                "--spm_model_file", spm, "--max_seq_length", str(max_seq_length), "--dupe_factor", str(dupe_factor),
                "--num_workers", str(workers), "--partition_number", "2", "--progress", "false"]
        done, seconds = _time(lambda: subprocess.run([sys.executable, "-m", "src.create_pretraining_data", *argv],
                                                     cwd=ROOT, check=True, capture_output=True, text=True))
        instances = int(re.search(r"instances=(\d+)", done.stdout).group(1))
        rows.append(_rate_row("whole tool (CLI)", workers, seconds, len(documents), instances, megabytes))
    return rows


def _iterate(pipeline) -> int:
    return sum(len(batch["input_ids"]) for batch in pipeline.create_dict_iterator(output_numpy=True, num_epochs=1))


def bench_readers(workdir: Path, spm: str, batch_size: int = 32) -> list:
    """rows/s of each reader over data written here: the pretraining output, MRPC train, SQuAD v1.1 dev half."""
    common = ["--spm_model_file", spm]
    finetune = workdir / "mrpc_train.mindrecord"
    cfd.main(common + ["--task_name", "mrpc", "--data_dir", str(ASSETS / "glue" / "MRPC"), "--split", "train",
                       "--output_file", str(finetune)])
    squad = workdir / "squad_dev.mindrecord"
    csd.main(common + ["--input_file", str(ASSETS / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json"),
                       "--output_file", str(squad), "--is_training", "false"])
    readers = [
        ("create_pretraining_dataset", lambda: dataset.create_pretraining_dataset(
            workdir / "pt1.mindrecord", batch_size, seed=0)),  # written as 2 shards
        ("create_classification_dataset", lambda: dataset.create_classification_dataset(
            finetune, batch_size, seed=0)),
        ("create_squad_dataset (eval)", lambda: dataset.create_squad_dataset(squad, batch_size, is_training=False)),
    ]
    rows = []
    for name, build in readers:
        count, seconds = _time(lambda: _iterate(build()))
        rows.append({"reader": name, "rows": count, "seconds": seconds, "rows/s": count / seconds})
    return rows


def _print_table(rows: list) -> None:
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    keys = list(rows[0])
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print(" | ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for row in cells:
        print(" | ".join(c.rjust(w) for c, w in zip(row, widths)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(ASSETS / "derived" / "squad_v1.1_dev_contexts_corpus.txt"))
    parser.add_argument("--spm_model_file", default=str(ASSETS / "tokenizer" / "albert_30k-clean.model"))
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3, help="use the corpus this many times (as new documents)")
    parser.add_argument("--json_out", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        text = Path(args.corpus).read_text(encoding="utf-8").strip("\n")
        corpus.write_text("\n\n".join([text] * args.repeat) + "\n", encoding="utf-8")
        creation = bench_creation(corpus, args.spm_model_file, args.dupe_factor, args.max_seq_length, Path(tmp))
        readers = bench_readers(Path(tmp), args.spm_model_file)
    print(f"pretraining data creation: {args.corpus} x {args.repeat} ({len(text) * args.repeat / 1e6:.2f} MB), "
          f"dupe_factor {args.dupe_factor}, max_seq_length {args.max_seq_length}")
    _print_table(creation)
    print("\nMindRecord readers")
    _print_table(readers)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"creation": creation, "readers": readers}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
