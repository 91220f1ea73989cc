"""Data pipeline benchmarks: pretraining data creation at corpus scale and where its time goes, the fine-tuning data
creators at full data-set size, and the MindRecord readers.

    python benchmarks/bench_data.py --scale 16,64,256 [--plot scale.png] [--baseline_tree DIR [--baseline_max_mb 64]]
    python benchmarks/bench_data.py --stages [--stage_mb 4]
    python benchmarks/bench_data.py --finetune_scale [--finetune_fraction 1.0]
    python benchmarks/bench_data.py --readers
    common: [--max_seq_length 512] [--max_predictions_per_seq 76] [--dupe_factor 10] [--num_workers 2]
            [--corpus FILE] [--spm_model_file MODEL] [--json_out F]

--scale: for each corpus size (MB, made by repeating `--corpus` as new documents) the whole tool runs as users run
it (`python -m src.create_pretraining_data`, its own process) and is measured from outside: wall seconds, MB/s of
corpus, instances/s and the peak resident memory summed over its process tree (main process and workers, sampled
every 50 ms). `--plot` draws memory and time against corpus size. `--baseline_tree DIR` also runs the tool of
another checkout (e.g. `git worktree add DIR <commit>`) with the same settings, up to `--baseline_max_mb`.
--stages: one worker, in this process: reading (and sentence splitting), tokenization alone, instance making
(tokenize + pair + mask) and MindRecord writing, each timed alone, with its share.
--finetune_scale: SQuAD v2.0 train (130,319 questions), MNLI train (392,702 pairs) and RACE train (87,866
questions) sized inputs made by repeating the shared assets, converted by their creators (measured as in --scale).
--readers: rows/s of the dataset.py pipelines.
Defaults use ../shared/assets; without them the corpus is Python's own pydoc text (src.sample_corpus).
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_common as common  # noqa: E402
from model_utils.errors import UserError, run_cli  # noqa: E402

ASSETS = ROOT.parent / "shared" / "assets"
SPM = ASSETS / "tokenizer" / "albert_30k-clean.model"
FULL_SIZES = {"squad_v2_train_questions": 130319, "mnli_train_pairs": 392702, "race_train_questions": 87866}


# ------------------------------------------------------------------------------------------------ measuring
def _tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants (from /proc)."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total


def measure(command: Sequence[str], cwd: Path) -> Dict[str, object]:
    """Run `command`; wall seconds, peak RSS of its process tree (MB) and its stdout. Fails loudly if it fails."""
    started = time.perf_counter()
    process = subprocess.Popen(list(command), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output: Dict[str, str] = {}
    readers = [threading.Thread(target=lambda name, stream: output.update({name: stream.read()}), args=pair)
               for pair in (("stdout", process.stdout), ("stderr", process.stderr))]
    for reader in readers:
        reader.start()
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss(process.pid))
        time.sleep(0.05)
    for reader in readers:
        reader.join()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}): {output.get('stderr', '')[-2000:]}")
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peak / 2 ** 20), "stdout": output.get("stdout", "")}


def _summary_value(stdout: str, key: str) -> int:
    return int(re.search(rf"\b{key}=(\d+)", stdout).group(1))


# ------------------------------------------------------------------------------------------------ inputs
def source_corpus(corpus: str, workdir: Path) -> Path:
    if corpus:
        return Path(corpus)
    shared = ASSETS / "derived" / "squad_v1.1_dev_contexts_corpus.txt"
    if shared.is_file():
        return shared
    made = workdir / "pydoc_corpus.txt"
    subprocess.run([sys.executable, "-m", "src.sample_corpus", "--output_file", str(made)], cwd=ROOT, check=True)
    return made


def make_corpus(source: Path, megabytes: float, path: Path) -> Path:
    """`source` (documents separated by blank lines) repeated until the file holds `megabytes` MB."""
    text = source.read_text(encoding="utf-8").strip("\n").encode("utf-8") + b"\n\n"
    target = int(megabytes * 1e6)
    with open(path, "wb") as handle:
        while handle.tell() + len(text) <= target:
            handle.write(text)
        cut = text[:max(0, target - handle.tell())].rsplit(b"\n\n", 1)[0]
        handle.write(cut + b"\n" if cut else b"")
    return path


# ------------------------------------------------------------------------------------------------ --scale
def _creation_command(args: argparse.Namespace, corpus: Path, output: Path, tree: Path = ROOT) -> List[str]:
    command = [sys.executable, "-m", "src.create_pretraining_data", "--input_file", str(corpus), "--output_file",
               str(output), "--spm_model_file", args.spm_model_file, "--max_seq_length", str(args.max_seq_length),
               "--max_predictions_per_seq", str(args.max_predictions_per_seq), "--dupe_factor", str(args.dupe_factor),
               "--num_workers", str(args.num_workers), "--progress", "false"]
    return command + (["--partition_number", "1"] if _takes_partition_number(tree) else [])


def _takes_partition_number(tree: Path) -> bool:
    """Whether the tree's pretraining tool is the in-memory one from before streaming (it needs the flag)."""
    import yaml
    with open(tree / "create_data_config.yaml", encoding="utf-8") as handle:
        return "partition_number" in next(yaml.safe_load_all(handle)).get("pretraining", {})


def _scale_row(label: str, megabytes: float, result: Dict[str, object], output: Path) -> Dict[str, object]:
    instances = _summary_value(str(result["stdout"]), "instances")
    written = sum(p.stat().st_blocks * 512 for p in output.parent.iterdir() if p.is_file())  # on disk
    return {"tool": label, "corpus_mb": megabytes, "seconds": result["seconds"],
            "MB/s": round(megabytes / float(result["seconds"]), 3),
            "instances/s": round(instances / float(result["seconds"])), "instances": instances,
            "peak_rss_mb": result["peak_rss_mb"], "output_mb_on_disk": round(written / 1e6)}


def _tree_label(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True)
    return f"baseline {done.stdout.strip() or tree}"


def bench_scale(args: argparse.Namespace, sizes: List[float], workdir: Path) -> List[Dict[str, object]]:
    source = source_corpus(args.corpus, workdir)
    rows = []
    for megabytes in sizes:
        corpus = make_corpus(source, megabytes, workdir / f"corpus_{megabytes}.txt")
        runs = [("this tree", ROOT)]
        if args.baseline_tree and megabytes <= args.baseline_max_mb:
            runs.append((_tree_label(Path(args.baseline_tree)), Path(args.baseline_tree)))
        for label, tree in runs:
            output = workdir / f"out_{megabytes}_{len(rows)}" / "pretrain.mindrecord"
            result = measure(_creation_command(args, corpus, output, tree), tree)
            rows.append(_scale_row(label, megabytes, result, output))
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(output.parent)
        corpus.unlink()
    return rows


def plot_scale(rows: List[Dict[str, object]], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, seconds) = plt.subplots(1, 2, figsize=(10, 4))
    for tool, style in zip(dict.fromkeys(row["tool"] for row in rows), ("o-", "x--")):
        mine = [row for row in rows if row["tool"] == tool]
        sizes = [row["corpus_mb"] for row in mine]
        memory.plot(sizes, [row["peak_rss_mb"] for row in mine], style, label=tool)
        seconds.plot(sizes, [row["seconds"] for row in mine], style, label=tool)
    memory.set(xlabel="corpus MB", ylabel="peak RSS of the process tree (MB)", ylim=(0, None))
    seconds.set(xlabel="corpus MB", ylabel="wall seconds", ylim=(0, None))
    for axes in (memory, seconds):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------------ --stages
def bench_stages(args: argparse.Namespace, workdir: Path) -> List[Dict[str, object]]:
    """Each stage of the tool timed alone on one core: where the time goes."""
    from src import create_pretraining_data as cpd
    from src.data.corpus import Corpus
    from src.data.mindrecord_io import ColumnTable, MindRecordFile
    from src.data.tokenization import FullTokenizer

    corpus = make_corpus(source_corpus(args.corpus, workdir), args.stage_mb, workdir / "stages.txt")
    tokenizer = FullTokenizer(None, True, args.spm_model_file)
    options = cpd.MaskingOptions(args.max_seq_length, args.max_predictions_per_seq)
    timings = {}
    start = time.perf_counter()
    documents = list(Corpus([corpus]).documents())
    timings["read + split documents"] = time.perf_counter() - start
    start = time.perf_counter()
    for document in documents:
        for sentence in document.sentences:
            tokenizer.encode(sentence)
    timings["tokenize (SentencePiece)"] = time.perf_counter() - start
    start = time.perf_counter()
    maker = cpd.InstanceMaker(tokenizer, options, 1)
    instances = [arrays for document in documents
                 for arrays in maker.document_rounds(document, maker.tokenize_document(document), args.dupe_factor)]
    timings["pair + mask (x dupe_factor)"] = time.perf_counter() - start - timings["tokenize (SentencePiece)"]
    import mindspore.mindrecord  # noqa: F401  (its import, ~2 s once per process, is not writing time)
    start = time.perf_counter()
    output = MindRecordFile(workdir / "stages.mindrecord", cpd.mindrecord_schema(options), "stages")
    for arrays in instances:
        output.write(ColumnTable(arrays))
    output.commit()
    timings["write MindRecord"] = time.perf_counter() - start
    total = sum(timings.values())
    count = sum(len(a["input_ids"]) for a in instances)
    return [{"stage": stage, "seconds": round(seconds, 2), "share": f"{100 * seconds / total:.0f}%",
             "MB/s": round(args.stage_mb / seconds, 2), "instances/s": round(count / seconds)}
            for stage, seconds in timings.items()]


# ------------------------------------------------------------------------------------------------ --finetune_scale
def make_squad_v2(path: Path, questions: int) -> int:
    """SQuAD v2.0 json of at least `questions` questions: the shared dev articles repeated with new ids."""
    articles = []
    for name in ("dev-v2.0.subset_Normans_Rhine.json", "dev-v2.0.subset_Normans_ComplexityTheory.json"):
        articles += json.loads((ASSETS / "squad" / "v2.0" / name).read_text(encoding="utf-8"))["data"]
    data, count = [], 0
    while count < questions:
        for article in articles:
            copy = json.loads(json.dumps(article))
            for paragraph in copy["paragraphs"]:
                for qa in paragraph["qas"]:
                    qa["id"] = f"{qa['id']}-{count}"
                    count += 1
            data.append(copy)
    path.write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return count


def make_mnli(folder: Path, pairs: int) -> int:
    """MNLI-layout train.tsv of `pairs` rows: the real MNLI header, sentence pairs from MRPC, labels in turn."""
    header = (ASSETS / "glue" / "hf_dummy" / "mnli" / "MNLI" / "train.tsv").read_text(encoding="utf-8").splitlines()[0]
    with open(ASSETS / "glue" / "MRPC" / "train.tsv", encoding="utf-8-sig", newline="") as handle:
        mrpc = [(row[3], row[4]) for row in list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
    labels = ("entailment", "neutral", "contradiction")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.tsv", "w", encoding="utf-8") as handle:
        handle.write(header + "\n")
        for i in range(pairs):
            first, second = mrpc[i % len(mrpc)]
            handle.write(f"{i}\t{i}\t{i}n\tfiction\t-\t-\t-\t-\t{first}\t{second}\t{labels[i % 3]}\t{labels[i % 3]}\n")
    return pairs


def make_race(folder: Path, questions: int) -> int:
    """RACE layout (train/high, train/middle) holding copies of the shared RACE files: >= `questions` questions."""
    sources = sorted((ASSETS / "race" / "RACE").glob("*/*/*.txt"))
    count, copy = 0, 0
    while count < questions:
        for source in sources:
            level = source.parent.name
            target = folder / "train" / level / f"{copy}-{source.parent.parent.name}-{source.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            count += len(json.loads(source.read_text(encoding="utf-8"))["questions"])
        copy += 1
    return count


def bench_finetune_scale(args: argparse.Namespace, workdir: Path) -> List[Dict[str, object]]:
    spm = ["--spm_model_file", args.spm_model_file]
    squad_questions = make_squad_v2(workdir / "train-v2.0.json",
                                    int(FULL_SIZES["squad_v2_train_questions"] * args.finetune_fraction))
    mnli_pairs = make_mnli(workdir / "MNLI", int(FULL_SIZES["mnli_train_pairs"] * args.finetune_fraction))
    race_questions = make_race(workdir / "RACE", int(FULL_SIZES["race_train_questions"] * args.finetune_fraction))
    jobs = [
        ("SQuAD v2.0 train, seq 384", squad_questions, "questions",
         ["src.create_squad_data", "--input_file", str(workdir / "train-v2.0.json"), "--version_2_with_negative",
          "true", "--max_seq_length", "384"]),
        ("MNLI train, seq 128", mnli_pairs, "pairs",
         ["src.create_finetune_data", "--task_name", "mnli", "--data_dir", str(workdir / "MNLI")]),
        ("RACE train, seq 512", race_questions, "questions",
         ["src.create_finetune_data", "--task_name", "race", "--data_dir", str(workdir / "RACE"), "--max_seq_length",
          "512"]),
    ]
    rows = []
    for name, count, unit, command in jobs:
        output = workdir / "out" / f"{len(rows)}.mindrecord"
        result = measure([sys.executable, "-m", *command, *spm, "--output_file", str(output)], ROOT)
        records = json.loads(Path(str(output) + ".meta.json").read_text(encoding="utf-8"))["num_records"]
        rows.append({"data set": name, unit if unit == "pairs" else "questions": count, "records": records,
                     "seconds": result["seconds"], "records/s": round(records / float(result["seconds"])),
                     "peak_rss_mb": result["peak_rss_mb"]})
        print(json.dumps(rows[-1]), flush=True)
        shutil.rmtree(output.parent)
    return rows


# ------------------------------------------------------------------------------------------------ --readers
def bench_readers(args: argparse.Namespace, workdir: Path, batch_size: int = 32) -> List[Dict[str, object]]:
    """rows/s of each reader over data written here: pretraining, MRPC train, SQuAD v1.1 dev half."""
    import dataset
    from src import create_finetune_data as cfd
    from src import create_squad_data as csd

    corpus = make_corpus(source_corpus(args.corpus, workdir), 2, workdir / "readers.txt")
    pretrain = workdir / "pt.mindrecord"
    subprocess.run([sys.executable, "-m", "src.create_pretraining_data", "--input_file", str(corpus), "--output_file",
                    str(pretrain), "--spm_model_file", args.spm_model_file, "--max_seq_length", "128",
                    "--max_predictions_per_seq", "20", "--dupe_factor", "1", "--progress", "false"],
                   cwd=ROOT, check=True, capture_output=True)
    common = ["--spm_model_file", args.spm_model_file]
    finetune, squad = workdir / "mrpc_train.mindrecord", workdir / "squad_dev.mindrecord"
    cfd.main(common + ["--task_name", "mrpc", "--data_dir", str(ASSETS / "glue" / "MRPC"), "--split", "train",
                       "--output_file", str(finetune)])
    csd.main(common + ["--input_file", str(ASSETS / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json"),
                       "--output_file", str(squad), "--is_training", "false"])
    readers = [("create_pretraining_dataset", lambda: dataset.create_pretraining_dataset(pretrain, batch_size, seed=0)),
               ("create_classification_dataset", lambda: dataset.create_classification_dataset(finetune, batch_size,
                                                                                              seed=0)),
               ("create_squad_dataset (eval)", lambda: dataset.create_squad_dataset(squad, batch_size,
                                                                                   is_training=False))]
    rows = []
    for name, build in readers:
        start = time.perf_counter()
        count = sum(len(batch["input_ids"])
                    for batch in build().create_dict_iterator(output_numpy=True, num_epochs=1))
        seconds = time.perf_counter() - start
        rows.append({"reader": name, "rows": count, "seconds": round(seconds, 2), "rows/s": round(count / seconds)})
    return rows


# ------------------------------------------------------------------------------------------------ main
def print_table(title: str, rows: List[Dict[str, object]]) -> None:
    print(f"\n{title}")
    keys = list(dict.fromkeys(key for row in rows for key in row))  # a column only some rows have is kept
    cells = [[str(row.get(key, "")) for key in keys] for row in rows]
    widths = [max(len(key), *(len(cell[i]) for cell in cells)) for i, key in enumerate(keys)]
    print(" | ".join(key.rjust(width) for key, width in zip(keys, widths)))
    for cell in cells:
        print(" | ".join(value.rjust(width) for value, width in zip(cell, widths)))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="", help="comma-separated corpus sizes in MB, e.g. 16,64,256")
    parser.add_argument("--plot", default="", help="PNG of memory and time against corpus size (with --scale)")
    parser.add_argument("--baseline_tree", default="", help="another checkout (e.g. before streaming) to run too")
    parser.add_argument("--baseline_max_mb", type=float, default=64, help="run the baseline up to this corpus size")
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--stage_mb", type=float, default=4.0)
    parser.add_argument("--finetune_scale", action="store_true")
    parser.add_argument("--finetune_fraction", type=float, default=1.0, help="of the full data-set sizes")
    parser.add_argument("--readers", action="store_true")
    parser.add_argument("--corpus", default="", help="one-sentence-per-line corpus to repeat (default: shared)")
    parser.add_argument("--spm_model_file", default=str(SPM))
    parser.add_argument("--max_seq_length", type=int, default=512)
    parser.add_argument("--max_predictions_per_seq", type=int, default=76)
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--json_out", default="")
    args = parser.parse_args(argv)
    if not (args.scale or args.stages or args.finetune_scale or args.readers):
        parser.error("choose at least one of --scale, --stages, --finetune_scale, --readers")
    check_args(args)
    return args


def check_args(args: argparse.Namespace) -> None:
    """Everything decidable from the flags, before anything is measured."""
    try:
        args.sizes = [float(size) for size in args.scale.split(",")] if args.scale else []
    except ValueError:
        raise UserError(f"--scale takes comma-separated corpus sizes in MB, got {args.scale!r}") from None
    if any(not size > 0 for size in args.sizes):
        raise UserError(f"--scale sizes must be > 0 MB, got {args.scale!r}")
    for flag, path in (("--baseline_tree", args.baseline_tree), ("--corpus", args.corpus),
                       ("--spm_model_file", args.spm_model_file)):
        if path and not os.path.exists(path):
            raise UserError(f"{flag} not found: {path}")
    common.check_output(args.json_out, "--json_out")
    common.check_output(args.plot, "--plot")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    settings = (f"seq {args.max_seq_length}, max_predictions_per_seq {args.max_predictions_per_seq}, dupe_factor "
                f"{args.dupe_factor}, {args.num_workers} worker(s), {os.cpu_count()} cores")
    report: Dict[str, object] = {"settings": settings, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                 "environment": common.environment([])}  # the commit and the CPU measured
    with tempfile.TemporaryDirectory(prefix="bench_data-") as tmp:
        workdir = Path(tmp)
        if args.scale:
            rows = bench_scale(args, args.sizes, workdir)
            print_table(f"pretraining data creation at scale ({settings})", rows)
            report["scale"] = rows
            if args.plot:
                plot_scale(rows, args.plot, f"src.create_pretraining_data, {settings}")
        if args.stages:
            report["stages"] = bench_stages(args, workdir)
            print_table(f"where the time goes ({args.stage_mb} MB, one worker, seq {args.max_seq_length}, "
                        f"dupe_factor {args.dupe_factor})", report["stages"])
        if args.finetune_scale:
            report["finetune_scale"] = bench_finetune_scale(args, workdir)
            size = "full" if args.finetune_fraction == 1 else f"{args.finetune_fraction:g} of the full"
            print_table(f"fine-tuning data creators at {size} data-set size", report["finetune_scale"])
        if args.readers:
            report["readers"] = bench_readers(args, workdir)
            print_table("MindRecord readers", report["readers"])
    common.write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
