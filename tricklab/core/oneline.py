"""Text on one line: the control characters a file name or a value may hold, written as escapes.

`shown` is how every message and table line echoes a name from outside (a newline in a file name
cannot forge a line, an escape sequence cannot recolour a terminal); TrickLabError's message goes
through it when made, so a Python caller's error is the one line the CLI prints. No imports here:
core/errors.py and core/safeio.py both stand on it.
"""

import unicodedata

# The escapes for the control characters that have a short one; others as \xNN or \uNNNN.
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: object) -> str:
    """`text` for one line of output: control characters (newlines, escape sequences, C1 and
    Unicode line breaks) written as escapes, so a file name cannot forge a line of its own."""
    return "".join(char if char.isprintable() else _escape(char) for char in str(text))


def control_free(text: object) -> str:
    """`text` with its control characters and line breaks (Unicode Cc, Zl, Zp) as escapes and
    every other character as it is (a no-break space, an emoji's zero-width joiner): for data
    written on one line that a reader takes as text (CSV), where `shown` would change them."""
    return "".join(
        _escape(char) if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char
        for char in str(text)
    )


def _escape(char: str) -> str:
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}")
