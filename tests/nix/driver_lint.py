"""The NixOS test driver's lint of a VM test script, offline: what nixpkgs' nixos/lib/testing/driver.nix
runs before it builds a test's driver, where any message fails the build.

1. mypy, on `testScriptWithTypes`: a typing prelude, then one line of `NAME: QemuMachine;` for the
   machines, a line for containers and one for VLANs (none here), then the script. The flags are the
   driver's (`--no-implicit-optional --pretty --no-color-output`) and there is no configuration file
   (the Nix sandbox has none). The driver's package is importable there; here the stubs in
   tests/nix/driver_stubs/test_driver (found through MYPYPATH) declare its API, and
   driver_stubs/typing_prelude.py stands in for nixpkgs' test-script-prepend.py.
2. pyflakes, on the script alone, with `PYFLAKES_BUILTINS` = the pythonized machine names, then the
   driver's symbols (`generate-driver-symbols`: the keys of Driver.test_symbols() for a driver with no
   machine and no VLAN, DRIVER_SYMBOLS below).

The driver stops at the first of the two that fails; `lint` runs both and returns every message. A
machine is a QEMU node: containers and VLANs (`vlan1: VLan`, not a pyflakes builtin) are not modelled.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

STUBS = Path(__file__).resolve().parent / "driver_stubs"
PRELUDE = STUBS / "typing_prelude.py"

# Driver.test_symbols()'s general symbols, in its order: what `generate-driver-symbols` writes.
DRIVER_SYMBOLS = (
    "start_all",
    "test_script",
    "machines",
    "machines_qemu",
    "machines_nspawn",
    "vlans",
    "driver",
    "log",
    "os",
    "create_machine",
    "subtest",
    "run_tests",
    "join_all",
    "retry",
    "serial_stdout_off",
    "serial_stdout_on",
    "polling_condition",
    "BaseMachine",
    "QemuMachine",
    "NspawnMachine",
    "t",
    "debug",
    "dump_machine_ssh",
)

# The file names the driver's build uses: the messages name them.
SCRIPT_FILE = "test-script"
TYPED_FILE = "testScriptWithTypes"


def pythonize_name(name: str) -> str:
    """driver.nix's pythonizeName: a first character outside `[A-z_]` and any later one outside
    `[A-z0-9_]` becomes `_`. `A-z` is the ASCII range, so `[\\]^_`` and the backquote pass as well."""

    def keep(c: str, first: bool) -> bool:
        return "A" <= c <= "z" or c == "_" or (not first and "0" <= c <= "9")

    return "".join(c if keep(c, i == 0) else "_" for i, c in enumerate(name))


def machine_symbols(machines: list[str]) -> list[str]:
    """The machine names a script sees: pythonized, plus `machine` when there is exactly one machine
    and none is called that (driver.nix's theOnlyMachine)."""
    names = list(machines)
    if len(names) == 1 and "machine" not in names:
        names.append("machine")
    return [pythonize_name(n) for n in names]


def lint(script: str, machines: list[str]) -> list[str]:
    """Every message the driver's type check and lint give for `script` with these machine (node)
    names; empty when the driver's build would pass them."""
    names = machine_symbols(machines)
    with tempfile.TemporaryDirectory(prefix="driver-lint-") as tmp:
        work = Path(tmp)
        return _mypy(script, names, work) + _pyflakes(script, names, work)


def typed_script(script: str, names: list[str]) -> tuple[str, int]:
    """testScriptWithTypes as driver.nix writes it, and the number of lines before the script."""
    prelude = PRELUDE.read_text(encoding="utf-8")
    hints = " ".join(f"{n}: QemuMachine;" for n in names)
    head = f"{prelude}{hints}\n\n\n"  # `echo` of the VM hints, of the container hints, of the VLAN hints
    return head + script, head.count("\n")


def _clean_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MYPY", "PYFLAKES"))}
    # No user configuration either: the build's HOME has none.
    env.update(HOME=str(work), XDG_CONFIG_HOME=str(work / ".config"))
    return env


def _mypy(script: str, names: list[str], work: Path) -> list[str]:
    text, offset = typed_script(script, names)
    (work / TYPED_FILE).write_text(text, encoding="utf-8")
    env = _clean_env(work)
    env["MYPYPATH"] = str(STUBS)
    # A cache kept between runs only saves time (typeshed is re-read otherwise); it changes no result.
    env["MYPY_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / "hyperhive-driver-lint-mypy-cache")
    # --pretty wraps a message at the terminal's width (80 in the build): one line each reads better.
    env["MYPY_FORCE_TERMINAL_WIDTH"] = "1000"
    # The file by its absolute path, a new one each run, so that the shared cache can never take this
    # script for an earlier run's (mypy compares a cached file's path, size and mtime before its hash).
    typed = str(work / TYPED_FILE)
    cmd = [sys.executable, "-m", "mypy", "--no-implicit-optional", "--pretty", "--no-color-output", typed]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode == 0:  # notes alone do not fail the build
        return []
    # Exit 1: type errors; 2: a syntax error ("errors prevented further checking") or mypy failed.
    messages: list[str] = []
    # mypy names the file relative to its working directory.
    start = re.compile(rf"^(?:{re.escape(typed)}|{TYPED_FILE}):(\d+):(.*)$", re.DOTALL)
    for line in proc.stdout.splitlines():
        m = start.match(line)
        if m:
            lineno = int(m.group(1))
            # Report the script's own line numbers; a prelude line keeps its place in the typed file.
            where = f"{SCRIPT_FILE}:{lineno - offset}" if lineno > offset else f"{TYPED_FILE}:{lineno}"
            if m.group(2).startswith(" note:") and messages:
                messages[-1] += f"\n{where}:{m.group(2)}"  # a note belongs to the error before it
            else:
                messages.append(f"mypy: {where}:{m.group(2)}")
        elif messages and not re.match(r"^(Found \d+ errors?|Success:)", line):
            messages[-1] += "\n" + line  # --pretty: the source line, the caret, a wrapped message
    raw = (proc.stdout + proc.stderr).strip().replace(typed, TYPED_FILE)
    return messages or [f"mypy: exit {proc.returncode}: {raw}"]


def _pyflakes(script: str, names: list[str], work: Path) -> list[str]:
    (work / SCRIPT_FILE).write_text(script, encoding="utf-8")
    env = _clean_env(work)
    # driver.nix: `echo -n NAMES,` then `cat driver-symbols`.
    env["PYFLAKES_BUILTINS"] = ",".join(names) + "," + ",".join(DRIVER_SYMBOLS)
    cmd = [sys.executable, "-m", "pyflakes", SCRIPT_FILE]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False)
    messages = [f"pyflakes: {line}" for line in proc.stdout.splitlines() if line.strip()]
    if proc.stderr.strip():  # a syntax error: the message, the source line, the caret
        messages.append(f"pyflakes: {proc.stderr.rstrip()}")
    if proc.returncode != 0 and not messages:
        messages.append(f"pyflakes: exit {proc.returncode} without a message")
    return messages
