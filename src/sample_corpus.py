"""A pretraining corpus that needs no download: the Python reference documentation shipped with Python.

    python -m src.sample_corpus --output_file data/pydoc_corpus.txt

`pydoc_data.topics` (part of the standard library) holds about 80 documentation topics, roughly 0.5 MB of
English prose. Each topic becomes one document, written one sentence per line with a blank line between
documents: the input format of `src.spm_train` and `src.create_pretraining_data`. It is what the quick start
trains its vocabulary and tiny model on.
"""
import os
import re
import sys
from pathlib import Path
from typing import Dict, List

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import UserError, run_cli
from src.common.atomic_files import check_outputs, save_text_atomic
from src.common.run_log import log_to
from src.data.corpus import MARKUP
from src.data.input_text import parse_tool_config

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_RULE = re.compile(r"^[*=\-~^]{3,}$")  # reST heading underlines
# Longer "sentences" are lists and tables run together: they would not fit the quick start's 128-token instances.
MAX_WORDS = 50


def topic_sentences(text: str) -> List[str]:
    """Prose sentences of one topic: paragraphs joined; code, grammar rules, headings, over-long runs and text that
    reads as markup (quoted keys: `"c.isalpha()": ...`) dropped, so that the corpus passes the data tool's checks."""
    sentences: List[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if not lines or lines[0].startswith((" " * 4, ">>>", "\t")) or "::=" in paragraph \
                or any(_RULE.match(line.strip()) for line in lines):
            continue
        joined = " ".join(line.strip() for line in lines)
        sentences += [s for s in _SENTENCE_END.split(joined)
                      if 3 <= len(s.split()) <= MAX_WORDS and not MARKUP.search(s)]
    return sentences


def write_corpus(output_file: str, overwrite: bool = False) -> Dict[str, int]:
    """Write the corpus; returns the numbers of documents, sentences and bytes."""
    from pydoc_data.topics import topics

    if not output_file:
        raise UserError("set --output_file")
    path = Path(output_file)
    check_outputs([str(path)], overwrite)
    documents = [topic_sentences(topics[name]) for name in sorted(topics)]
    # once each: two topics may hold the same text (the "if" statement's is also under "else")
    documents = [list(d) for d in dict.fromkeys(tuple(d) for d in documents if len(d) >= 2)]
    text = "\n\n".join("\n".join(sentences) for sentences in documents) + "\n"
    save_text_atomic(text, str(path), replace=overwrite)
    return {"documents": len(documents), "sentences": sum(map(len, documents)), "bytes": len(text.encode())}


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "sample_corpus", __doc__.splitlines()[0])
    stats = write_corpus(config.output_file, config.overwrite)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    print(f"wrote {config.output_file}: " + ", ".join(f"{k}={v}" for k, v in stats.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
