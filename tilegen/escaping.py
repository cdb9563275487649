"""The one way spec-derived text (spec paths, folder names, docs) reaches generated code.

Names are validated by pattern and numbers re-emitted from parsed values; free text is not, so it
goes through `code_text` on its way into a comment or a string literal: every character that is
not printable (line and paragraph separators, control and format characters: all that
str.splitlines or a tokenizer could take for a line break) is written as a Python escape, as is
the backslash. The text then stays on its one line, inside its comment or literal.
"""


def code_text(text: str) -> str:
    """`text` with backslashes and non-printable characters escaped (printable text unchanged)."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def docstring_text(text: str) -> str:
    """`text` for the inside of a triple-quoted docstring: code_text, quotes escaped too."""
    return code_text(text).replace('"', '\\"')
