"""Text from outside is shown with its control characters spelled out, as `cat -v` and `less` do."""

from __future__ import annotations

import json

from hyperhive.visible import visible, visible_json


def test_escape_sequences_are_spelled_in_caret_notation() -> None:
    osc52 = "\x1b]52;c;cHduZWQ=\x07"
    assert visible(f"copy {osc52} clear \x1b[2J\x1bc") == "copy ^[]52;c;cHduZWQ=^G clear ^[[2J^[c"


def test_every_c0_control_but_newline_and_tab_and_del_are_spelled() -> None:
    assert visible("a\x00b\rc\x0bd\x0ce\x1cf\x7fg") == "a^@b^Mc^Kd^Le^\\f^?g"
    assert visible("line\n\tindented\n") == "line\n\tindented\n"


def test_c1_controls_line_separators_bidi_overrides_and_lone_surrogates_are_named_by_code_point() -> None:
    assert visible("\x9b2J\x85") == "<U+009B>2J<U+0085>"
    assert visible("a\u2028b\u2029c") == "a<U+2028>b<U+2029>c"
    assert visible("\u202eevil\u202c \u2066x\u2069 \u200f") == "<U+202E>evil<U+202C> <U+2066>x<U+2069> <U+200F>"
    assert visible("\ud800") == "<U+D800>"


def test_text_in_any_script_and_emoji_passes_unchanged() -> None:
    text = "héllo Привет 你好 مرحبا 👩‍👩‍👧 ✓ » « ─ …"
    assert visible(text) is text


def test_visible_json_means_the_same_and_carries_no_control_character_raw() -> None:
    doc = {"text": "a\x1b[31m\x9b\u2028\u202e\ud800 é ✓", "n": [1, "\x7f"]}
    line = visible_json(doc)
    assert json.loads(line) == doc
    assert "é ✓" in line  # readable, not ensure_ascii
    assert not any(c in line for c in "\x1b\x9b\u2028\u202e\ud800\x7f")


def test_characters_that_show_nothing_are_spelled_out_but_joiners_that_scripts_need_stay() -> None:
    # Issue 24: zero-width and tag characters reached the page as they are, so text could hide in plain sight
    # ("ASCII smuggling": each tag character mirrors an ASCII one and shows nothing).
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "rm -rf")
    assert visible(f"ok{hidden}") == "ok" + "".join(f"<U+{0xE0000 + ord(c):05X}>" for c in "rm -rf")
    assert visible("a\u200bb\u2060c\ufeffd\u180ee\U000e0100") == "a<U+200B>b<U+2060>c<U+FEFF>d<U+180E>e<U+E0100>"
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    assert visible(family) == family and visible("\u0645\u200c\u06cc") == "\u0645\u200c\u06cc"


def test_visible_json_escapes_characters_beyond_the_basic_plane_as_surrogate_pairs() -> None:
    doc = {"hidden": "x\U000e0041\U000e0100y"}
    line = visible_json(doc)
    assert json.loads(line) == doc and "\\udb40\\udc41" in line
