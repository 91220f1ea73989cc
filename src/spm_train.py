"""Train a SentencePiece vocabulary with ALBERT's recipe, for pretraining on your own corpus.

    python -m src.spm_train --input_file "corpus/*.txt" --model_prefix vocab/my30k --vocab_size 30000

The input is read as src.create_pretraining_data reads it (files, globs and folders; text, lines, JSON lines,
WikiExtractor or Parquet, found from the content): the sentences of its documents are the training text.

Recipe (as Google trained 30k-clean.model): unigram model, <pad>=0, <unk>=1, no <s>/</s>, control symbols
[CLS] [SEP] [MASK] at ids 2..4, user symbols ( ) " - . – £ € as pieces of their own, character coverage
0.99995, shuffled input sentences. The corpus is normalised exactly as the tokenizer normalises text before
encoding (whitespace collapse, accent stripping, lowercasing when do_lower_case), so the pieces match what
`FullTokenizer(spm_model_file=..., do_lower_case=...)` will look up. Writes PREFIX.model and PREFIX.vocab.
"""
import io
import os
import sys
from pathlib import Path
from typing import Iterator, List, Sequence

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import UserError, run_cli
from src.common.atomic_files import atomic_path, check_outputs
from src.common.run_log import log_to
from src.data.corpus import DEFAULT_TEXT_KEY, Corpus
from src.data.input_text import parse_tool_config, resolve_input_files
from src.data.tokenization import preprocess_text

SEED = 12345


def _sentences(paths: Sequence[Path], do_lower_case: bool, input_format: str, text_key: str) -> Iterator[str]:
    for document in Corpus(paths, input_format, text_key).documents():
        for sentence in document.sentences:
            text = preprocess_text(sentence, lower=do_lower_case)
            if text:
                yield text


def _symbols(spec: str) -> List[str]:
    return [s for s in spec.split(",") if s]


def train_sentencepiece(input_files: Sequence[Path], model_prefix: str, vocab_size: int = 30000,
                        do_lower_case: bool = True, model_type: str = "unigram",
                        character_coverage: float = 0.99995, input_sentence_size: int = 10000000,
                        control_symbols: str = "[CLS],[SEP],[MASK]",
                        user_defined_symbols: str = '(,),",-,.,–,£,€', num_threads: int = 2,
                        overwrite: bool = False, input_format: str = "auto",
                        text_key: str = DEFAULT_TEXT_KEY) -> Path:
    """Train and write PREFIX.model / PREFIX.vocab (atomically); returns the model path."""
    import sentencepiece as spm

    if not model_prefix:
        raise UserError("set --model_prefix (writes PREFIX.model and PREFIX.vocab)")
    prefix = Path(model_prefix).expanduser().absolute()
    outputs = [Path(f"{prefix}.model"), Path(f"{prefix}.vocab")]
    check_outputs([str(path) for path in outputs], overwrite)
    if next(_sentences(input_files, do_lower_case, input_format, text_key), None) is None:
        raise UserError(f"empty corpus: no text in {', '.join(map(str, input_files))}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.set_random_generator_seed(SEED)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_sentences(input_files, do_lower_case, input_format, text_key), model_writer=model,
            vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True, pad_id=0, unk_id=1,
            bos_id=-1, eos_id=-1, control_symbols=_symbols(control_symbols),
            user_defined_symbols=_symbols(user_defined_symbols), num_threads=num_threads, minloglevel=2)
    except RuntimeError as err:
        hint = " (raise --vocab_size: it must hold every character of the corpus)" if "required_chars" in str(err) \
            else " (lower --vocab_size for a corpus this small)" if "vocab_size" in str(err) else ""
        raise UserError(f"SentencePiece training failed: {err}{hint}") from err
    _write_atomically(outputs[0], model.getvalue(), overwrite)
    _write_atomically(outputs[1], _vocab_text(model.getvalue()).encode("utf-8"), overwrite)
    return outputs[0]


def _vocab_text(model: bytes) -> str:
    """The PREFIX.vocab listing spm_train writes: piece <TAB> score, one per id."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model)
    return "".join(f"{processor.IdToPiece(i)}\t{processor.GetScore(i):g}\n" for i in range(processor.GetPieceSize()))


def _write_atomically(path: Path, data: bytes, overwrite: bool) -> None:
    with atomic_path(str(path), replace=overwrite) as tmp, open(tmp, "wb") as out:
        out.write(data)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "spm", __doc__.splitlines()[0])
    model = train_sentencepiece(resolve_input_files(config.input_file), config.model_prefix, config.vocab_size,
                                config.do_lower_case, config.model_type, config.character_coverage,
                                config.input_sentence_size, config.control_symbols, config.user_defined_symbols,
                                config.num_threads, config.overwrite, config.input_format, config.text_key)
    log_to(str(model.parent))
    print(f"wrote {model} and {model.with_suffix('.vocab')}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
