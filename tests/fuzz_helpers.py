"""Shared pieces of the property-based fuzz tests (tests/test_fuzz_*.py): settings and text strategies.

    ALBERT_FUZZ_SCALE=20 python -m pytest tests/test_fuzz_*.py    # 20 times the examples, from a random seed

In CI (CI=true) every fuzz test runs CI_SCALE times its examples, still the same ones on every run (about 40 s
more for the three files on two cores).
"""
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.ci_skips import ci_environment

CI_SCALE = 2
RANDOM_SEARCH = "ALBERT_FUZZ_SCALE" in os.environ
SCALE = float(os.environ["ALBERT_FUZZ_SCALE"]) if RANDOM_SEARCH else CI_SCALE if ci_environment() else 1


def fuzz(max_examples: int) -> settings:
    """Deterministic (the same examples on every run and machine, no example database) and without deadline:
    the fuzz tests run in CI on shared, busy CPUs. ALBERT_FUZZ_SCALE searches longer, from a random seed."""
    return settings(max_examples=max(1, round(max_examples * SCALE)), deadline=None, derandomize=not RANDOM_SEARCH,
                    database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# Characters and strings where text handling usually breaks: controls and odd whitespace (Python's str.split
# and BERT disagree on some), zero-width and byte-order marks, NFKD-expanding and context-dependent characters,
# combining marks, decomposed Hangul, CJK, emoji, right-to-left text, TeX quotes, digit-comma pieces, the
# tokenizers' special tokens, SentencePiece's word marker, WordPiece's continuation marker and a lone surrogate
# (json allows "\ud83d" escapes).
TRICKY = ["\x00", "\r", "\t", "\n", "\x0b", "\x0c", "\x1b", "\x1c", "\x85", "\u00a0", "\u200b", "\u2028", "\u202e",
          "\u3000", "\ufeff", "\ufffd", "\u00ad", "½", "ﬁ", "™", "ǅ", "㎏", "ﷺ", "¨", "\u0301", "é", "e\u0301", "İ",
          "ß", "Σ", "ΑΣ ", "¸", "한", "\u1112\u1161\u11ab", "中文", "𠀀", "ꀀ", "😀", "👍🏽", "עברית", "عربي", "``", "''",
          "1,", "1990,", "[MASK]", "[CLS]", "<unk>", "[UNK]", "<pad>", "\u2581", "##", " ", "  ", ".", "-",
          "\ud83d"]

ANY_CHAR = st.characters(exclude_categories=())  # every plane, surrogates included
PIECE = st.one_of(st.text(ANY_CHAR, max_size=8), st.sampled_from(TRICKY),
                  st.text(st.characters(codec="ascii"), max_size=10))
TEXT = st.lists(PIECE, max_size=12).map("".join)
# A handful of words, for SQuAD contexts and questions.
WORDS = st.lists(st.one_of(st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=9),
                           PIECE), min_size=1, max_size=14).map(" ".join)
