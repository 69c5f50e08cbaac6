"""The module's evaluated `systemd.services.<name>` entry as a `.service` file, and systemd's reading of it.

`to_service_file` mirrors what nixpkgs' nixos/lib/systemd-lib.nix writes for a service (checked against
that file on the 26.05 line), so that the unit the module evaluates to can be started under a real
systemd here (tests/nix/test_systemd_unit.py):

- `[Unit]`: `Description=`, then `After=`/`Wants=` one line per entry;
- `[Service]`: one `Environment=` line per variable, sorted by name, written as NixOS does,
  `Environment=` + the JSON string of `NAME=value` (NixOS adds `PATH` from `path`; here the caller
  passes the directories that stand for it); then `serviceConfig` sorted by key, a list giving one line
  per item (an empty list no line), `true`/`false` for booleans, other values as text;
- `[Install]`: `WantedBy=`.

On a Nix host the VM tests (nix/tests) cover nixpkgs' own rendering; this converter is for the rig.

`parse_environment_line` emulates how systemd reads such a line (config_parse_environ: words split and
unquoted with C escapes undone, then `%` specifiers resolved), so that the offline round-trip test checks
what the harness will really see. The rig checks the emulation against systemd itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

# Nix's builtins.toJSON for a string, as far as the difference matters: non-ASCII kept raw, `/` not
# escaped, control characters as \uXXXX except \n \r \t (Nix writes \b and \f as \u0008 and \u000c).
_NIX_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def nix_to_json_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _NIX_ESCAPES:
            out.append(_NIX_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


def to_service_file(service: Mapping[str, Any], path_dirs: Iterable[str] = ()) -> str:
    lines = ["[Unit]"]
    if service.get("description"):
        lines.append(f"Description={service['description']}")
    for key, name in (("after", "After"), ("wants", "Wants"), ("requires", "Requires")):
        lines += [f"{name}={v}" for v in service.get(key, [])]
    lines += ["", "[Service]"]
    env = dict(service.get("environment", {}))
    dirs = list(path_dirs)
    if dirs:
        env["PATH"] = ":".join(dirs)
    for name in sorted(env):
        lines.append("Environment=" + nix_to_json_string(f"{name}={env[name]}"))
    for key in sorted(service.get("serviceConfig", {})):
        value = service["serviceConfig"][key]
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{key}={_value(item)}")
    if service.get("wantedBy"):
        lines += ["", "[Install]"] + [f"WantedBy={v}" for v in service["wantedBy"]]
    return "\n".join(lines) + "\n"


class SystemdSyntaxError(ValueError):
    pass


_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}
_WHITESPACE = " \t\n\r"


def _cunescape_one(s: str, i: int) -> tuple[str, int]:
    """systemd's cunescape_one: the character for the escape starting at s[i] (after the backslash)."""
    c = s[i]
    if c in _SIMPLE:
        return _SIMPLE[c], i + 1
    for letter, digits in (("x", 2), ("u", 4), ("U", 8)):
        if c == letter:
            hexits = s[i + 1 : i + 1 + digits]
            if len(hexits) != digits or any(h not in "0123456789abcdefABCDEF" for h in hexits):
                raise SystemdSyntaxError(f"bad \\{letter} escape")
            code = int(hexits, 16)
            if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise SystemdSyntaxError(f"\\{letter}{hexits} is not an allowed character")
            if letter == "x" and code > 0x7F:
                raise SystemdSyntaxError("an 8-bit \\x escape (a raw byte) is not text")
            return chr(code), i + 1 + digits
    if c in "01234567":
        octal = s[i : i + 3]
        if len(octal) != 3 or any(o not in "01234567" for o in octal):
            raise SystemdSyntaxError("bad octal escape")
        code = int(octal, 8)
        if code == 0 or code > 0x7F:
            raise SystemdSyntaxError("octal escape outside ASCII")
        return chr(code), i + 3
    raise SystemdSyntaxError(f"unknown escape \\{c}")


def _words(rvalue: str) -> list[str]:
    """extract_first_word(EXTRACT_UNQUOTE | EXTRACT_CUNESCAPE), repeated over the whole value."""
    words: list[str] = []
    i, n = 0, len(rvalue)
    while True:
        while i < n and rvalue[i] in _WHITESPACE:
            i += 1
        if i >= n:
            return words
        word: list[str] = []
        quote = ""
        while i < n:
            c = rvalue[i]
            if c == "\\":
                if i + 1 >= n:
                    raise SystemdSyntaxError("trailing backslash")
                ch, i = _cunescape_one(rvalue, i + 1)
                word.append(ch)
            elif quote:
                if c == quote:
                    quote = ""
                else:
                    word.append(c)
                i += 1
            elif c in "'\"":
                quote = c
                i += 1
            elif c in _WHITESPACE:
                break
            else:
                word.append(c)
                i += 1
        if quote:
            raise SystemdSyntaxError("unterminated quote")
        words.append("".join(word))


def _resolve_specifiers(word: str) -> str:
    """Only `%%` may appear: every value is escaped, so any other specifier is a rendering bug."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "%":
            if word[i + 1 : i + 2] != "%":
                raise SystemdSyntaxError(f"unescaped specifier {word[i : i + 2]!r} in {word!r}")
            out.append("%")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def parse_environment_line(line: str) -> dict[str, str]:
    """The variables one `Environment=...` line assigns, as systemd reads them."""
    key, _, rvalue = line.partition("=")
    if key != "Environment":
        raise SystemdSyntaxError(f"not an Environment= line: {line!r}")
    out: dict[str, str] = {}
    for word in _words(rvalue.strip()):
        assignment = _resolve_specifiers(word)
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            raise SystemdSyntaxError(f"invalid environment assignment {assignment!r}")
        out[name] = value
    return out


def environment_of(unit_text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    # Lines end at "\n" only, as systemd reads them: str.splitlines() would also split inside a quoted value
    # at U+0085, U+2028 and the like (found by the round-trip test with an acp.env value of "\x85").
    for line in unit_text.split("\n"):
        if line.startswith("Environment="):
            env.update(parse_environment_line(line))
    return env


def json_compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
