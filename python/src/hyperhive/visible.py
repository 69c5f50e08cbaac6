"""Text from outside made safe to show: every control character made visible, the way `cat -v` and `less` do.

An agent's reply, a task's output or a wake's body may hold escape sequences. Printed raw, they are the
terminal's commands: OSC 52 writes the operator's clipboard, OSC 0 sets the window title, `ESC [2J`
clears the screen. Pasted raw into a prompt, a CR, a NUL or a Unicode line separator breaks the lines
the reader counts on. So what came from outside is shown with its controls spelled out:

    ESC, NUL, CR, BEL, ... and DEL     ^[  ^@  ^M  ^G  ^?      (caret notation, as `cat -v`)
    C1 controls (U+0080–U+009F), U+2028/U+2029, bidi overrides and isolates, lone surrogates
                                        <U+009B>                (as `less`)
    characters that show nothing and can hide text: zero-width space, word joiner and the invisible
    operators (U+200B, U+2060–U+2064), the byte-order mark (U+FEFF), the Mongolian vowel separator
    (U+180E), tag characters (U+E0000–U+E007F: whole sentences hidden in plain sight) and the
    supplementary variation selectors (U+E0100–U+E01EF)
                                        <U+E0041>

Zero-width joiner and non-joiner (U+200C, U+200D) stay: scripts and emoji sequences need them.

Newline and tab are kept: they are layout, not commands. Everything else passes unchanged, emoji and
every script included. Standard library only (the prompt, the renderer and the CLI use it).
"""

from __future__ import annotations

import json
import re

# C0 (but newline and tab), DEL, C1; the line and paragraph separators a reader may break lines at; the bidi
# controls that reorder what is shown (U+061C, U+200E/F, U+202A–U+202E, U+2066–U+2069); lone surrogates,
# which no terminal can be sent (UTF-8 cannot encode them).
_RANGES = [(0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x61C, 0x61C), (0x200E, 0x200F), (0x2028, 0x202E)]
_RANGES += [(0x2066, 0x2069), (0xD800, 0xDFFF)]
# What shows nothing: zero-width space, word joiner and invisible operators, BOM, Mongolian vowel separator,
# tags, supplementary variation selectors (each can carry text a reader never sees).
_RANGES += [(0x180E, 0x180E), (0x200B, 0x200B), (0x2060, 0x2064), (0xFEFF, 0xFEFF), (0xE0000, 0xE007F)]
_RANGES += [(0xE0100, 0xE01EF)]
_UNSAFE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _RANGES) + "]")
_CODES = [code for a, b in _RANGES for code in range(a, b + 1)]


def _spell(code: int) -> str:
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


# str.translate does the work in C: a 1 MiB body of escape characters takes ~0.1 s (a regex calling back into
# Python per match took 0.8 s).
_SPELLED = {code: _spell(code) for code in _CODES}
_ESCAPED = {code: json.dumps(chr(code))[1:-1] if code > 0xFFFF else f"\\u{code:04x}" for code in _CODES}


def visible(text: str) -> str:
    """`text` with every control character but newline and tab spelled out (see the module's docstring)."""
    return text.translate(_SPELLED) if _UNSAFE.search(text) else text


def visible_json(doc: object) -> str:
    """`doc` as one line of JSON that is safe on a terminal and means the same: non-ASCII text stays
    readable (`ensure_ascii=False`), but the characters `visible` spells out are written as `\\uXXXX`
    escapes (JSON already escapes C0; outside strings JSON text is plain ASCII, so this touches strings only)."""
    text = json.dumps(doc, ensure_ascii=False)
    return text.translate(_ESCAPED) if _UNSAFE.search(text) else text
