"""Small fine-tuning data sets made from the real assets with the package's own data tools, and tiny-model flags."""
import json
from pathlib import Path
from typing import Dict, List

from tests.pretrain_helpers import tool

ASSETS = Path(__file__).resolve().parents[2] / "shared" / "assets"
SPM = str(ASSETS / "tokenizer" / "albert_30k-clean.model")
# The tiny network of the pretraining tests; the vocabulary is the data's (30000 SentencePiece pieces).
TINY_FINETUNE = ["--albert_network", "albert_tiny", "--net_cfg.hidden_size", "32", "--net_cfg.embedding_size", "16",
                 "--net_cfg.num_hidden_layers", "2", "--net_cfg.num_attention_heads", "2",
                 "--net_cfg.intermediate_size", "64", "--device_target", "CPU", "--log_steps", "5"]


def mindrecord_rows(*paths) -> List[dict]:
    """The rows of MindRecord files, in file order (MindDataset without shuffle), as dicts of numpy arrays."""
    import mindspore.dataset as ds
    return list(ds.MindDataset([str(p) for p in paths], shuffle=False).create_dict_iterator(output_numpy=True))


def head_lines(source: Path, target: Path, rows: int, header: bool) -> Path:
    """The first `rows` data lines of a GLUE tsv (after its header line, if it has one): the test's small split."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    target.write_text("".join(lines[:rows + int(header)]), encoding="utf-8")
    return target


def make_glue(folder: Path, task: str, train_rows: int, dev_rows: int, seq: int = 64) -> Dict[str, Path]:
    """MindRecord for the first rows of the real CoLA or MRPC train and dev files."""
    glue = {"cola": ("CoLA", "in_domain_train.tsv", "in_domain_dev.tsv"), "mrpc": ("MRPC", "train.tsv", "dev.tsv")}
    name, train_file, dev_file = glue[task]
    out = {}
    for split, source, rows in (("train", train_file, train_rows), ("dev", dev_file, dev_rows)):
        small = head_lines(ASSETS / "glue" / name / source, folder / f"{task}_{split}.tsv", rows, task != "cola")
        out[split] = folder / f"{task}_{split}.mindrecord"
        tool("create_finetune_data", ["--task_name", task, "--data_dir", str(ASSETS / "glue" / name),
                                      "--input_file", str(small), "--split", split, "--output_file", str(out[split]),
                                      "--spm_model_file", SPM, "--max_seq_length", str(seq)])
    return out


def make_race(folder: Path, seq: int = 128) -> Dict[str, Path]:
    out = {}
    for split in ("train", "dev"):
        out[split] = folder / f"race_{split}.mindrecord"
        tool("create_finetune_data", ["--task_name", "race", "--data_dir", str(ASSETS / "race" / "RACE"),
                                      "--split", split, "--output_file", str(out[split]), "--spm_model_file", SPM,
                                      "--max_seq_length", str(seq), "--max_qa_length", "32"])
    return out


def squad_subset(source: Path, target: Path, articles: List[int], paragraphs: int) -> Path:
    """A SQuAD json with the first `paragraphs` paragraphs of the chosen articles of a real file."""
    data = json.loads(source.read_text(encoding="utf-8"))
    data["data"] = [dict(data["data"][a], paragraphs=data["data"][a]["paragraphs"][:paragraphs]) for a in articles]
    target.write_text(json.dumps(data), encoding="utf-8")
    return target


SQUAD_SOURCES = {"1.1": ("v1.1/dev-v1.1.part1_bloomsbury.json", "v1.1/dev-v1.1.part2_bloomsbury.json"),
                 "2.0": ("v2.0/dev-v2.0.subset_Normans_Rhine.json",
                         "v2.0/dev-v2.0.subset_Normans_ComplexityTheory.json")}


def make_squad(folder: Path, version: str, paragraphs: int = 6, seq: int = 64) -> Dict[str, Path]:
    """Training features from one real dev file and evaluation features (+ the json to score against) from
    the other, `paragraphs` paragraphs of each article."""
    train_source, eval_source = (ASSETS / "squad" / name for name in SQUAD_SOURCES[version])
    out = {"train_json": squad_subset(train_source, folder / f"squad{version}_train.json", [0, 1], paragraphs),
           "dev_json": squad_subset(eval_source, folder / f"squad{version}_dev.json", [0, 1], paragraphs)}
    for split, source in (("train", out["train_json"]), ("dev", out["dev_json"])):
        out[split] = folder / f"squad{version}_{split}.mindrecord"
        tool("create_squad_data", ["--input_file", source, "--output_file", out[split], "--spm_model_file", SPM,
                                   "--is_training", str(split == "train").lower(),
                                   "--version_2_with_negative", str(version == "2.0").lower(),
                                   "--max_seq_length", seq, "--doc_stride", "32", "--max_query_length", "24"])
    return out


# The assets hold only 2-6 rows of MNLI and STS-B: these tasks get files in their own GLUE layout (the real header
# of the asset) filled with real MRPC sentence pairs and labels the test chooses, so it knows the truth itself.
GLUE_LIKE = {"mnli": ("mnli/MNLI/train.tsv", lambda i, s1, s2, label: [str(i), str(i), f"{i}x", "mrpc", "-", "-", "-",
                                                                       "-", s1, s2, label, label]),
             "sts-b": ("stsb/SST-B/train.tsv", lambda i, s1, s2, label: [str(i), "mrpc", "mrpc", "2004", str(i),
                                                                         "none", "none", s1, s2, label])}


def make_glue_like(folder: Path, task: str, labels: List[str], seq: int = 32) -> Path:
    """MindRecord of a `task` (mnli or sts-b) train file whose row i is MRPC train pair i labelled `labels[i]`."""
    header_source, row = GLUE_LIKE[task]
    header = (ASSETS / "glue" / "hf_dummy" / header_source).read_text(encoding="utf-8").splitlines()[0]
    pairs = [line.split("\t")[3:5] for line in
             (ASSETS / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines()[1:len(labels) + 1]]
    tsv = folder / f"{task}_train.tsv"
    tsv.write_text("\n".join([header] + ["\t".join(row(i, s1, s2, label)) for i, ((s1, s2), label)
                                         in enumerate(zip(pairs, labels))]) + "\n", encoding="utf-8")
    out = folder / f"{task}_train.mindrecord"
    tool("create_finetune_data", ["--task_name", task, "--input_file", str(tsv), "--split", "train",
                                  "--output_file", str(out), "--spm_model_file", SPM, "--max_seq_length", str(seq)])
    return out
