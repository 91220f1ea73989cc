"""json.loads for a user's text: every way it can fail to parse is a json.JSONDecodeError, with its line and column.

Python refuses to convert an integer of more than sys.get_int_max_str_digits() (4300) digits, and json.loads lets
that plain ValueError out: a request, corpus line or config with such a number would end in a traceback where the
callers report malformed json in one line. Here it becomes a JSONDecodeError at the number.
"""
import json
import re
import sys
from typing import IO, Any


def loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # the integer-string conversion limit
        limit = sys.get_int_max_str_digits()
        number = re.search(r"\d{%d,}" % (limit + 1), text)
        digits = len(number[0]) if number else limit + 1
        raise json.JSONDecodeError(f"an integer of {digits} digits exceeds Python's limit of {limit}", text,
                                   number.start() if number else 0) from None


def load(handle: IO[str]) -> Any:
    return loads(handle.read())
