"""Reading real corpora: WikiExtractor output in both formats, folders, format by content, Parquet and one
document per line, the sanity summary, and bounded, linear reading of hostile input.

References: the real `wikiextractor` (PyPI) run on a MediaWiki dump this test writes, whose plain sentences are
written here by hand; records compared between inputs that must agree by design (the same text as JSON lines,
`lines` and Parquet); the sentence rule and the pair truncation compared with their code as it was before they were
made linear (kept below, verbatim, as the reference).
"""
import bz2
import gzip
import html
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataset
from model_utils.errors import UserError
from src import create_pretraining_data as cpd
from src.data import corpus as corpus_module
from src.data.corpus import Corpus, read_documents, split_sentences
from src.data.input_text import resolve_input_files
from tests.pretrain_helpers import pretraining_records

# ------------------------------------------------------------------------------------------- a Wikipedia dump
# 12 articles: a title and paragraphs of plain sentences (what a reader should get back), each sentence also
# written with wiki markup that WikiExtractor removes (bold, links, references, templates, entities).
TOPICS = ["Anarchism", "Albedo", "A", "Alabama", "Achilles", "Abraham Lincoln", "Aristotle", "An American in Paris",
          "Academy Award", "Actrius", "Animalia", "AT&T"]
SUBJECTS = ["The river", "A castle", "The engine", "An orchard", "The library", "This harbour", "The valley",
            "A market"]
PLACES = ["the northern plain", "a quiet town", "the old capital", "the coast", "a mountain pass", "the delta"]


def _article(index: int) -> List[List[str]]:
    """Paragraphs of plain sentences of article `index` (3 paragraphs of 3 to 6 sentences)."""
    rng = random.Random(index)
    paragraphs = []
    for p in range(3):
        paragraphs.append([f"{rng.choice(SUBJECTS)} near {rng.choice(PLACES)} was described in {1800 + 7 * index + p} "
                           f"by writers of {TOPICS[index].replace('&', 'and')} number {s}."
                           for s in range(3 + (index + p) % 4)])
    return paragraphs


def _wikitext(index: int) -> str:
    """The article in MediaWiki markup; WikiExtractor turns it back into the sentences of _article."""
    lines = ["{{Infobox topic|name=" + TOPICS[index] + "}}"]
    for p, paragraph in enumerate(_article(index)):
        marked = []
        for s, sentence in enumerate(paragraph):
            words = sentence.split(" ")
            if s == 0:
                words[0] = f"'''{words[0]}'''"
            if s == 1:
                words[1] = f"[[{words[1].capitalize()} (disambiguation)|{words[1]}]]"
            marked.append(" ".join(words) + ("<ref>A source, page 12.</ref>" if s == 2 else ""))
        lines.append(" ".join(marked))
        lines.append("")
    return "\n".join(lines)


def _mediawiki_dump(path: Path) -> Path:
    """A MediaWiki XML export of the 12 articles, one tag per line as Wikipedia's dumps are written."""
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">',
           "  <siteinfo>", "    <sitename>Wikipedia</sitename>",
           "    <base>https://en.wikipedia.org/wiki/Main_Page</base>", "    <namespaces>",
           '      <namespace key="0" case="first-letter" />',
           '      <namespace key="10" case="first-letter">Template</namespace>', "    </namespaces>", "  </siteinfo>"]
    for index, title in enumerate(TOPICS):
        out += ["  <page>", f"    <title>{html.escape(title)}</title>", "    <ns>0</ns>", f"    <id>{index + 10}</id>",
                "    <revision>", f"      <id>{index + 1000}</id>",
                f'      <text xml:space="preserve">{html.escape(_wikitext(index))}</text>', "    </revision>",
                "  </page>"]
    path.write_text("\n".join(out + ["</mediawiki>"]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    """The dump through the real WikiExtractor, in its default (<doc>) and --json formats, one article per file
    (`-b 0`: several files per folder, as `-b 1M` makes of a real dump)."""
    pytest.importorskip("wikiextractor")
    root = tmp_path_factory.mktemp("wiki")
    dump = _mediawiki_dump(root / "enwiki-sample.xml")
    trees = {}
    for name, extra in (("doc", []), ("json", ["--json"])):
        subprocess.run([sys.executable, "-m", "wikiextractor.WikiExtractor", "-q", "-b", "0", "-o",
                        str(root / name), *extra, str(dump)], check=True, timeout=120, capture_output=True)
        trees[name] = root / name
        assert (root / name / "AA" / "wiki_11").is_file(), name  # WikiExtractor exits 0 even when it fails
    return trees


def test_wikiextractor_trees_read_as_the_articles_in_both_formats(wiki):
    for name, tree in wiki.items():
        files = resolve_input_files(str(tree))
        assert len(files) >= 12, name  # one file per article: the folder was walked
        reader = Corpus(files)
        documents = list(reader.documents())
        kind = "wikiextractor" if name == "doc" else "jsonl"
        assert reader.counts.formats == {kind: 12, "empty": len(files) - 12}, name  # -b 0 leaves wiki_00 empty
        assert [d.sentences for d in documents] == [[s for p in _article(i) for s in p] for i in range(12)], name
        text = " ".join(s for d in documents for s in d.sentences)
        for markup in ("<doc", "</doc>", "curid=", "&amp;", "'''", "[[", "{{", "<ref", "\\u"):
            assert markup not in text, (name, markup)
    raw = (wiki["doc"] / "AA" / "wiki_01").read_text(encoding="utf-8")  # wiki_00 is left empty by -b 0
    assert raw.startswith('<doc id="10" url="https://en.wikipedia.org/wiki?curid=10" title="Anarchism">\nAnarchism\n')
    assert 'title="AT&amp;T"' in "".join(p.read_text() for p in resolve_input_files(str(wiki["doc"])))


def test_wikiextractor_folders_make_the_same_records_in_both_formats(wiki, tmp_path, spm_path, capsys):
    stats = {name: _create(spm_path, tree, tmp_path / f"{name}.mindrecord") for name, tree in wiki.items()}
    assert pretraining_records(tmp_path / "doc.mindrecord") == pretraining_records(tmp_path / "json.mindrecord")
    assert stats["doc"]["documents"] == stats["json"]["documents"] == 12
    assert stats["doc"]["markup_sentences"] == 0 and stats["doc"]["warnings"] == []
    meta = dataset.load_data_meta(tmp_path / "doc.mindrecord")
    assert meta["input"]["formats"] == {"wikiextractor": 12, "empty": 1}


def test_the_same_dump_twice_in_one_folder_is_warned_about(wiki, tmp_path, spm_path, capsys):
    """Both WikiExtractor formats of one dump in one folder (as `wikiextractor` run twice into the same place leaves
    them): 24 documents, 12 of them repeats of the first 12, named in a warning with the first repeat; the data is
    written all the same. A file copied beside itself is the same case."""
    import shutil

    for name, tree in wiki.items():
        shutil.copytree(tree, tmp_path / "both" / name)
    stats = _create(spm_path, tmp_path / "both", tmp_path / "both.mindrecord")
    assert (stats["documents"], stats["documents_duplicate"]) == (24, 12)
    first = resolve_input_files(str(tmp_path / "both" / "json"))[1]  # wiki_00 is empty (-b 0)
    assert f"warning: 12 document(s) repeat an earlier document word for word (first: {first} line 1: " in \
        capsys.readouterr().err
    (tmp_path / "copy").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "copy" / name).write_text("".join(t + "\n\n" for t in _documents_text(5)), encoding="utf-8")
    reader = Corpus(resolve_input_files(str(tmp_path / "copy")), "lines")
    assert len(list(reader.documents())) == 10 and reader.counts.duplicates == 5
    assert reader.counts.duplicate_example.startswith(f"{tmp_path / 'copy' / 'b.txt'} line 1: 'Sentence 0 of")


def test_duplicates_are_found_in_bounded_memory(tmp_path, monkeypatch):
    """DigestSet answers as a set does across its merges; past MAX_HASHED_DOCUMENTS distinct documents, later ones
    are checked against those but not kept (the warning says so)."""
    monkeypatch.setattr(corpus_module, "MERGED_DIGESTS", 8)
    rng = random.Random(3)
    digests = [rng.getrandbits(64) for _ in range(300)]
    digests += rng.sample(digests, 200) + [0, 0, 2 ** 64 - 1, 2 ** 64 - 1]
    rng.shuffle(digests)
    seen, reference = corpus_module.DigestSet(), set()
    for digest in digests:
        assert (digest in seen) == (digest in reference), digest
        if digest not in reference:
            seen.add(digest)
            reference.add(digest)
    assert len(seen) == len(reference) and len(seen.recent) < 64  # most are in the array
    monkeypatch.setattr(corpus_module, "MAX_HASHED_DOCUMENTS", 2)
    (tmp_path / "a.txt").write_text("Same.\n\nSame.\n\nOther.\n\nThird.\n\nSame.\n\nThird.\n", encoding="utf-8")
    reader = Corpus([tmp_path / "a.txt"])
    assert len(list(reader.documents())) == 6
    assert (reader.counts.duplicates, reader.counts.unhashed) == (2, 2)
    assert reader.counts.warnings()[0].endswith("; 2 documents after the first 2 distinct ones were checked against "
                                                "those only")


def test_spm_train_reads_the_sentences_of_the_same_documents(wiki):
    from src.data.tokenization import preprocess_text
    from src.spm_train import _sentences
    expected = [preprocess_text(s, lower=True) for i in range(12) for p in _article(i) for s in p]
    for tree in wiki.values():
        assert list(_sentences(resolve_input_files(str(tree)), True, "auto", "text")) == expected


def test_a_declared_format_the_content_contradicts_stops(wiki, tmp_path):
    doc_file, json_file = wiki["doc"] / "AA" / "wiki_01", wiki["json"] / "AA" / "wiki_01"
    cases = [(doc_file, "text", rf"{doc_file} line 1: the file starts with a WikiExtractor <doc> header but "
                                rf"--input_format is text; use --input_format auto \(or wikiextractor\)"),
             (json_file, "text", rf"{json_file} line 1: the file starts with a JSON object \(JSON lines\) but "
                                 rf"--input_format is text"),
             (json_file, "wikiextractor", r"starts with a JSON object"),
             (doc_file, "jsonl", r"starts with a WikiExtractor <doc> header but --input_format is jsonl")]
    for path, declared, message in cases:
        with pytest.raises(UserError, match=message):
            list(read_documents([path], declared))
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("A first sentence.\nA second one.\n\n" + doc_file.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(UserError, match=rf"{mixed} line 4: a WikiExtractor <doc ...> line in a file read as text"):
        list(read_documents([mixed]))
    loose = tmp_path / "loose"
    loose.write_text(doc_file.read_text(encoding="utf-8") + "stray text\n", encoding="utf-8")
    line = len(loose.read_text().splitlines())
    with pytest.raises(UserError, match=rf"{loose} line {line}: text outside a <doc \.\.\.> block"):
        list(read_documents([loose]))
    nested = tmp_path / "nested"
    nested.write_text('<doc id="1" url="u" title="T">\nT\n\nOne. Two.\n<doc id="2" url="v" title="U">\n</doc>\n')
    with pytest.raises(UserError, match=rf"{nested} line 5: <doc> header inside the <doc> block of line 1"):
        list(read_documents([nested]))
    in_jsonl = tmp_path / "in.jsonl"
    in_jsonl.write_text('{"text": "One. Two."}\n<doc id="2" url="v" title="U">\n')
    with pytest.raises(UserError, match=rf"{in_jsonl} line 2: malformed json .*a WikiExtractor <doc> line"):
        list(read_documents([in_jsonl]))


def test_format_is_found_by_content_not_by_name(tmp_path):
    documents = [["First sentence here.", "Second sentence here."], ["Third one.", "Fourth one."]]
    as_json = "".join(json.dumps({"text": " ".join(d)}) + "\n" for d in documents)
    as_doc = "".join(f'<doc id="{i}" url="x?curid={i}" title="T{i}">\nT{i}\n\n{" ".join(d)}\n</doc>\n'
                     for i, d in enumerate(documents))
    (tmp_path / "a.txt").write_text(as_json)  # JSON lines under a .txt name
    (tmp_path / "b.json").write_text(as_doc)  # <doc> blocks under a .json name
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(("\n\n" + "\n\n".join("\n".join(d) for d in documents))
                                                        .encode()))  # text, after blank lines, under a .jsonl name
    (tmp_path / "d").write_bytes(bz2.compress(as_doc.encode()))
    for name, kind in (("a.txt", "jsonl"), ("b.json", "wikiextractor"), ("c.jsonl.gz", "text"), ("d", "wikiextractor")):
        reader = Corpus([tmp_path / name])
        assert [d.sentences for d in reader.documents()] == documents, name
        assert reader.counts.formats == {kind: 1}, name


def test_json_like_lines_in_a_text_file_are_counted_and_warned(tmp_path, spm_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text('A plain sentence opens it.\nAnother follows it.\n\n{"text": "a stray record"}\nMore plain text '
                    'is here.\n{"id": 3}\n\nLast document starts.\nAnd it ends here.\n', encoding="utf-8")
    stats = _create(spm_path, text, tmp_path / "out.mindrecord")
    assert any(f"2 line(s) in 1 text file(s) look like JSON objects (first: {text} line 4)" in w
               for w in stats["warnings"])
    assert "warning: 2 line(s) in 1 text file(s) look like JSON objects" in capsys.readouterr().err


def test_a_doc_block_cut_short_keeps_its_text_with_a_warning(tmp_path):
    cut = tmp_path / "wiki_07"
    cut.write_text('<doc id="1" url="u?curid=1" title="T">\nT\n\nOne here. Two there.\n</doc>\n'
                   '<doc id="2" url="u?curid=2" title="U">\nU\n\nThree here. Four there.\n', encoding="utf-8")
    reader = Corpus([cut])
    assert [d.sentences for d in reader.documents()] == [["One here.", "Two there."], ["Three here.", "Four there."]]
    assert reader.counts.warnings() == [f"1 <doc> block(s) without </doc> at the end of their file (file cut short?; "
                                        f"first: {cut} line 6); their text was kept"]


# ------------------------------------------------------------------------------------------- folders
def test_folders_globs_and_files_mix_in_a_stable_order(tmp_path):
    tree = tmp_path / "extracted"
    for name in ("AB/wiki_00", "AA/wiki_01", "AA/wiki_00", "AA/sub/wiki_02", "AA/.hidden", ".git/config",
                 "AA/out.mindrecord00000", "AA/out.mindrecord00000.db", "AA/out.mindrecord.meta.json",
                 "AA/notes.json"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("x\n")
    (tmp_path / "books.txt").write_text("x\n")
    (tmp_path / "empty").mkdir()
    got = resolve_input_files(f"{tree}, {tmp_path}/*.txt,{tree}/AA/wiki_00")
    expected = ["AA/notes.json", "AA/sub/wiki_02", "AA/wiki_00", "AA/wiki_01", "AB/wiki_00"]
    assert got == [(tmp_path / "books.txt").resolve()] + [(tree / name).resolve() for name in expected]
    assert got == resolve_input_files(f"{tmp_path}/books.txt,{tree}")  # the same files whatever the order given
    with pytest.raises(UserError, match=rf"input_file: no input file in the folder '{tmp_path}/empty'"):
        resolve_input_files(str(tmp_path / "empty"))
    with pytest.raises(UserError, match=rf"input_file: nothing matches '{tmp_path}/missing'"):
        resolve_input_files(str(tmp_path / "missing"))


# ------------------------------------------------------------------------------------------- Parquet, lines, Chinese
def _documents_text(count: int) -> List[str]:
    return [" ".join(f"Sentence {s} of document {d} tells of the {SUBJECTS[(d + s) % 8].split()[-1]} and "
                     f"{PLACES[(d * s) % 6]}." for s in range(3 + d % 5)) for d in range(count)]


def test_parquet_and_lines_give_the_records_of_json_lines(tmp_path, spm_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    texts = _documents_text(40)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    (tmp_path / "docs.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    table = pa.table({"id": list(range(40)), "title": [f"T{i}" for i in range(40)], "text": texts})
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=7)  # several row groups
    _create(spm_path, tmp_path / "docs.jsonl", tmp_path / "j.mindrecord")
    expected = pretraining_records(tmp_path / "j.mindrecord")
    assert len(expected) > 40
    _create(spm_path, tmp_path / "docs.txt", tmp_path / "l.mindrecord", "--input_format", "lines")
    _create(spm_path, tmp_path / "docs.parquet", tmp_path / "p.mindrecord")
    assert pretraining_records(tmp_path / "l.mindrecord") == expected
    assert pretraining_records(tmp_path / "p.mindrecord") == expected
    parts = [tmp_path / f"p{k}.mindrecord" for k in range(2)]  # Parquet rows are dealt to parts like lines
    for k, part in enumerate(parts):
        _create(spm_path, tmp_path / "docs.parquet", part, "--num_shards", "2", "--shard_index", str(k))
    assert sorted(pretraining_records(tmp_path / "p0-00000-of-00002.mindrecord") +
                  pretraining_records(tmp_path / "p1-00001-of-00002.mindrecord")) == sorted(expected)


def test_parquet_refusals(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"body": ["One. Two."]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "b.parquet")
    with pytest.raises(UserError, match=r"a\.parquet: no 'text' or 'content' column \(columns: body\); set --text_key"):
        list(read_documents([tmp_path / "a.parquet"]))
    assert [d.sentences for d in read_documents([tmp_path / "a.parquet"], "parquet", "body")] == [["One.", "Two."]]
    with pytest.raises(UserError, match=r"b\.parquet: column 'text' should hold strings, holds int64"):
        list(read_documents([tmp_path / "b.parquet"]))
    with pytest.raises(UserError, match=r"a\.parquet: the file is a Parquet file but --input_format is jsonl"):
        list(read_documents([tmp_path / "a.parquet"], "jsonl"))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    with pytest.raises(UserError, match=r"reading Parquet files needs pyarrow, which is not installed"):
        list(read_documents([tmp_path / "a.parquet"], "auto", "body"))


def test_parquet_dictionary_columns_are_read(tmp_path):
    """pandas writes a categorical column as an Arrow dictionary of strings: its documents are those of the same
    text stored as plain strings (it was refused: "should hold strings, holds dictionary")."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    texts = _documents_text(12) * 2
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode(), "title": pa.array(["T"] * 24)}),
                   tmp_path / "categorical.parquet", row_group_size=5)
    pq.write_table(pa.table({"text": texts}), tmp_path / "plain.parquet")
    assert str(pq.ParquetFile(tmp_path / "categorical.parquet").schema_arrow.field("text").type).startswith("dict")
    read = [[d.sentences for d in read_documents([tmp_path / name])] for name in ("categorical.parquet",
                                                                                "plain.parquet")]
    assert read[0] == read[1] == [split_sentences(text) for text in texts]


def _dictionary_bomb(path: Path, rows: int, value: str) -> None:
    """`rows` rows that all hold `value`, stored once in a compressed dictionary page: a few hundred bytes for a
    1.2 MB value. Without an Arrow schema in the file (other writers'), it reads back as plain strings."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([value]))
    pq.write_table(pa.table({"text": column}), path, compression="zstd", store_schema=False)


def _plain_rows(path: Path, groups: int, rows: int, size: int) -> None:
    """Rows of `size` distinct bytes each, plainly encoded (no dictionary), in `groups` row groups of `rows`."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=False) as writer:
        for group in range(groups):
            writer.write_table(pa.table({"text": [f"{group} {row} " + "b" * size for row in range(rows)]}, schema))


MEASURE_PEAK = """
import resource, sys
from pathlib import Path
import pyarrow.parquet
from src.data import corpus
corpus.split_sentences = lambda text: [text[:20]]  # the sentence rule (linear, one row at a time) is not measured
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
count = sum(1 for _ in corpus.read_documents([Path(sys.argv[1])]))
print(count, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
"""


def test_parquet_amplification_is_read_in_bounded_memory(tmp_path, project_root):
    """A 300-byte file whose 600 rows share a 1.2 MB dictionary value took 630 MB (256 rows decoded, then made
    Python strings, before any length check; 925 MB over the file); 256 plainly encoded 1 MB rows 557 MB. Now a
    batch decodes at most PARQUET_BATCH_BYTES (32 MB; Arrow's buffers may double it) and rows become strings one
    at a time: the peak, measured in a process of its own, stays far below, whatever the rows' sizes."""
    _dictionary_bomb(tmp_path / "bomb.parquet", 600, "a" * 1_200_000)
    _plain_rows(tmp_path / "plain.parquet", 16, 16, 1 << 20)
    assert (tmp_path / "bomb.parquet").stat().st_size < 1000
    for name, rows in (("bomb.parquet", 600), ("plain.parquet", 256)):
        done = subprocess.run([sys.executable, "-c", MEASURE_PEAK, str(tmp_path / name)], cwd=project_root,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        count, peak_mb = map(int, done.stdout.split())
        assert count == rows and peak_mb < 250, (name, peak_mb)


@pytest.mark.parametrize("dictionary", [True, False])
def test_parquet_values_over_the_line_cap_stop_before_conversion(tmp_path, monkeypatch, dictionary):
    """The cap of a line in the text readers (MAX_LINE_BYTES; 1 MB here) holds for a Parquet value, measured in
    Arrow before the value becomes a Python string."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 1 << 20)
    texts = ["One. Two.", "Three. Four.", "é" * (1 << 19) + "!"]  # 1 MB + 1 byte of UTF-8 in 2**19 + 1 characters
    column = pa.array(texts).dictionary_encode() if dictionary else pa.array(texts)
    pq.write_table(pa.table({"text": column}), tmp_path / "long.parquet")
    converted = []
    with pytest.raises(UserError, match=r"long\.parquet row 3: text longer than 1 MB$"):
        converted.extend(read_documents([tmp_path / "long.parquet"]))
    assert [d.sentences for d in converted] == [["One.", "Two."], ["Three.", "Four."]]


def test_chinese_corpora_records(tmp_path):
    """brightmart's nlp_chinese_corpus: wiki_zh (WikiExtractor JSON whose text starts with the title) and
    news2016zh (the text under `content`)."""
    wiki_zh = tmp_path / "wiki_00"
    wiki_zh.write_text(json.dumps({"id": "13", "url": "https://zh.wikipedia.org/wiki?curid=13", "title": "数学",
                                   "text": "数学\n\n数学是研究数量、结构以及空间等概念的学科。它是一门重要的学科！"},
                                  ensure_ascii=False) + "\n", encoding="utf-8")
    news = tmp_path / "news2016zh_valid.json"
    news.write_text(json.dumps({"news_id": "610130831", "title": "标题", "content": "第一句话。第二句话？“第三句。”"},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    assert [d.sentences for d in read_documents([wiki_zh, news])] == [
        ["数学是研究数量、结构以及空间等概念的学科。", "它是一门重要的学科！"], ["第一句话。", "第二句话？", "“第三句。”"]]


# ------------------------------------------------------------------------------------------- sanity summary
def test_sanity_summary_counts_and_warnings(tmp_path, spm_path, capsys):
    good = tmp_path / "good.txt"  # 3 documents of 2, 2 and 1 sentences (the last cannot make a pair)
    good.write_text("It was a bright day in May.\nThe birds sang all morning.\n\nA second story begins at night.\n"
                    "It ends before the dawn.\n\nAlone here.\n", encoding="utf-8")
    stats = _create(spm_path, good, tmp_path / "good.mindrecord")
    assert (stats["documents"], stats["documents_skipped"], stats["sentences"]) == (3, 1, 5)
    assert (stats["sentences_per_document_max"], stats["sentences_per_document_mean"]) == (2, 1.67)
    assert stats["sentences_too_long"] == 0 and stats["largest_document_fraction"] < 0.5
    meta = dataset.load_data_meta(tmp_path / "good.mindrecord")
    assert meta["stats"]["sentences"] == 5 and meta["stats"]["warnings"] == []
    out = capsys.readouterr()
    assert "corpus: 1 file(s) (1 text); 3 documents (1 skipped: fewer than two sentences" in out.out
    assert "warning" not in out.err
    # paragraphs in one text document: one document is all of the text, and many "sentences" exceed seq 64
    paragraphs = tmp_path / "paragraphs.txt"
    paragraphs.write_text("".join(t + "\n" for t in _documents_text(30)), encoding="utf-8")
    stats = _create(spm_path, paragraphs, tmp_path / "p.mindrecord")
    assert stats["largest_document_fraction"] == 1.0 and stats["sentences_too_long_fraction"] > 0.3
    err = capsys.readouterr().err
    assert f"warning: one document ({paragraphs} line 1) holds 100% of the text" in err
    assert "of sentences are longer than 61 tokens (max_seq_length - 3)" in err
    # WikiExtractor JSON read as one document per line: markup in the text
    raw = tmp_path / "raw.txt"
    raw.write_text("".join(json.dumps({"url": f"https://en.wikipedia.org/wiki?curid={i}", "text": f"Über {t}"})[1:]
                           + "\n" for i, t in enumerate(_documents_text(6))), encoding="utf-8")
    stats = _create(spm_path, raw, tmp_path / "r.mindrecord", "--input_format", "lines")
    assert stats["markup_sentences"] == 6
    err = capsys.readouterr().err
    assert re.search(rf"warning: 6 sentence\(s\) hold markup .* e\.g\. {raw} line 1: ", err)
    # one long record of --input_format lines: the advice for plain text (blank lines, --input_format lines) is not
    # given where it does not apply
    one = tmp_path / "one.txt"
    one.write_text(" ".join(_documents_text(30)) + "\n", encoding="utf-8")
    _create(spm_path, one, tmp_path / "o.mindrecord", "--input_format", "lines")
    err = capsys.readouterr().err
    assert f"warning: one document ({one} line 1) holds 100% of the text\n" in err and "blank lines" not in err


# ------------------------------------------------------------------------------------------- hostile input
def test_lines_are_capped_whatever_the_compression(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.txt.gz"
    bomb.write_bytes(gzip.compress(b"a" * (40 << 20), compresslevel=9))  # 40 MB of one line in ~40 KB
    flat = tmp_path / "flat.txt"
    flat.write_bytes(b"First line.\n" + b"word " * (300 << 10))
    for path, line in ((bomb, 1), (flat, 2)):
        started = time.perf_counter()
        with pytest.raises(UserError, match=rf"{path} line {line}: longer than 1 MB without a line break"):
            list(read_documents([path]))
        assert time.perf_counter() - started < 10


def test_a_document_over_the_cap_is_cut_into_pieces_not_held_whole(tmp_path, monkeypatch, spm_path):
    monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 1000)
    sentences = [f"Line {i} of a file without blank lines between its documents." for i in range(100)]
    text = tmp_path / "noblank.txt"
    text.write_text("\n".join(sentences) + "\n\nA short one.\nIt ends.\n", encoding="utf-8")
    reader = Corpus([text])
    documents = list(reader.documents())
    assert [s for d in documents[:-1] for s in d.sentences] == sentences  # nothing lost
    assert all(sum(map(len, d.sentences)) < 1000 + 70 for d in documents)
    assert {(d.doc_index, d.piece) for d in documents[:-1]} == {(0, p) for p in range(len(documents) - 1)}
    assert (documents[-1].doc_index, documents[-1].piece) == (1, 0)
    assert reader.counts.cut_documents == 1
    assert "1 document(s) longer than 1,000 characters were cut" in reader.counts.warnings()[0]
    stats = _create(spm_path, text, tmp_path / "cut.mindrecord")
    assert stats["documents_cut"] == 1 and any("were cut into pieces" in w for w in stats["warnings"])


def test_one_enormous_sentence_finishes(tmp_path, spm_path):
    """2 MB of words without punctuation: one sentence, split inside and truncated per instance."""
    words = " ".join(f"Word{i % 997}" for i in range(300000))
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"text": "A short opening sentence. " + words}) + "\n", encoding="utf-8")
    started = time.perf_counter()
    stats = _create(spm_path, path, tmp_path / "huge.mindrecord", "--dupe_factor", "1")
    assert stats["instances"] >= 1 and stats["sentences_too_long"] == 1
    assert time.perf_counter() - started < 120


def _split_sentences_before(text):
    """split_sentences as it was before it was made linear (the reference for 'same output')."""
    sentences = []
    for paragraph in text.splitlines():
        start = 0
        for match in corpus_module._SENTENCE_END.finditer(paragraph):
            end = match.end()
            if _is_boundary_before(paragraph, match.start(), end):
                piece = paragraph[start:end].strip()
                if piece:
                    sentences.append(piece)
                start = end
        piece = paragraph[start:].strip()
        if piece:
            sentences.append(piece)
    return sentences


def _is_boundary_before(text, begin, end):
    if text[begin] in corpus_module._CJK_END:
        return True
    if end == len(text):
        return True
    if not text[end].isspace():
        return False
    following = text[end:].lstrip()
    if following and following[0].islower():
        return False
    if text[begin] != ".":
        return True
    word = text[:begin].rsplit(None, 1)[-1] if text[:begin].strip() else ""
    word = word.lstrip(corpus_module._CLOSERS + "(“‘[")
    return not (len(word) == 1 and word.isalpha() or "." in word or word.lower() in corpus_module._ABBREVIATIONS)


def _truncate_before(first, second, max_tokens, rng):
    """truncate_pair_randomly as it was before it was made linear."""
    while len(first) + len(second) > max_tokens:
        longer = first if len(first) > len(second) else second
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("aZ .!?…。」\"')(\n\t\u3000J") + ["Dr", "e.g", "U.S", "x"]), max_size=60)
       .map("".join))
def test_sentence_rule_unchanged_on_tricky_text(text):
    assert split_sentences(text) == _split_sentences_before(text)


def test_sentence_rule_unchanged_on_the_real_corpora(assets):
    for name in ("derived/squad_v1.1_dev_contexts_corpus.txt", "pretrain/albert_zh_news_zh_1.txt",
                 "pretrain/bert_sample_text.txt"):
        text = (assets / name).read_text(encoding="utf-8")
        paragraphs = [" ".join(block.split("\n")) for block in text.split("\n\n")]  # documents as paragraphs
        assert [split_sentences(p) for p in paragraphs] == [_split_sentences_before(p) for p in paragraphs], name


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.integers(1, 200), st.integers(0, 2 ** 32))
def test_pair_truncation_unchanged(a, b, max_tokens, seed):
    ours, theirs = (list(range(a)), list(range(1000, 1000 + b))), (list(range(a)), list(range(1000, 1000 + b)))
    rng_ours, rng_theirs = random.Random(seed), random.Random(seed)
    cpd.truncate_pair_randomly(*ours, max_tokens, rng_ours)
    _truncate_before(*theirs, max_tokens, rng_theirs)
    assert ours == theirs and rng_ours.random() == rng_theirs.random()


def _best_of_three(function, argument) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        function(argument)
        times.append(time.perf_counter() - started)
    return min(times)


def test_splitting_and_truncation_are_linear():
    """8x the input costs about 8x the time (the code before: 64x). Bound 24x: far from both, robust to noise."""
    rng = random.Random(0)
    words = "alpha beta Gamma delta. Epsilon zeta! eta? Theta e.g. Dr. Who J. Smith".split()
    text = " ".join(rng.choice(words) for _ in range(400000))
    small, large = text[:len(text) // 8], text
    assert _best_of_three(split_sentences, large) < 24 * _best_of_three(split_sentences, small)

    def truncate(size):
        cpd.truncate_pair_randomly(list(range(size)), list(range(10)), 509, random.Random(1))
    assert _best_of_three(truncate, 800000) < 24 * _best_of_three(truncate, 100000)


# ------------------------------------------------------------------------------------------- helpers
def _create(spm_path, inputs, output, *extra):
    argv = ["--input_file", str(inputs), "--output_file", str(output), "--spm_model_file", spm_path,
            "--max_seq_length", "64", "--max_predictions_per_seq", "10", "--dupe_factor", "2", "--progress", "false",
            *extra]
    stats = cpd.create_pretraining_data(cpd.parse_tool_config(argv, "pretraining", "test"))
    cpd.report(stats)
    return stats
