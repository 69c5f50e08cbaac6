"""The flake's VM test scripts pass the NixOS test driver's lint (pyflakes with the driver's builtins,
mypy with its typing prelude): tests/nix/driver_lint.py runs it offline, and catches what the driver
catches."""

from __future__ import annotations

import pytest

from tests.nix.driver_lint import DRIVER_SYMBOLS, lint, machine_symbols, pythonize_name
from tests.nix.nixtool import FLAKE_CHECKS
from tests.nix.vm_tests import VmTest, vm_tests_to_collect

VM_TESTS = vm_tests_to_collect()


def test_every_vm_check_is_linted() -> None:
    assert sorted(t.name for t in VM_TESTS) == [c for c in FLAKE_CHECKS if c.startswith("vm-")]
    for t in VM_TESTS:
        # Each machine is started by the script (one machine is `machine`; several are named, vm-hive-two-hosts).
        assert t.machines == ["machine"] or len(t.machines) > 1
        for m in t.machines:
            assert f"{m}.start()" in t.script


@pytest.mark.parametrize("test", VM_TESTS, ids=lambda t: t.name)
def test_vm_test_script_passes_the_drivers_lint(test: VmTest) -> None:
    assert lint(test.script, test.machines) == []


def test_demo_scripts_define_start_task_before_the_prelude_uses_it() -> None:
    for t in VM_TESTS:
        assert t.script.index("START_TASK = ") < t.script.index("def start_task(")


# What the driver catches, each alone: one message per mistake, from the tool the driver runs.


def messages_of(body: str) -> list[str]:
    return lint(f'machine.start()\n{body}\nmachine.succeed("true")\n', ["machine"])


def test_an_f_string_without_placeholders_fails() -> None:
    assert messages_of('machine.wait_until_succeeds(f"test -S /run/x.sock", timeout=60)') == [
        "pyflakes: test-script:2:29: f-string is missing placeholders"
    ]


def test_an_undefined_name_fails() -> None:
    found = messages_of("wait_ready(machine)")
    assert "pyflakes: test-script:2:1: undefined name 'wait_ready'" in found
    assert any(m.startswith('mypy: test-script:2: error: Name "wait_ready" is not defined') for m in found)


def test_an_unused_import_fails() -> None:
    assert messages_of("import json") == ["pyflakes: test-script:2:1: 'json' imported but unused"]


def test_a_wrong_keyword_to_a_machine_method_fails() -> None:
    (found,) = messages_of('machine.wait_until_succeeds("true", timeot=60)')
    assert found.startswith(
        'mypy: test-script:2: error: Unexpected keyword argument "timeot" for "wait_until_succeeds"'
    ), found


def test_a_wrong_argument_type_to_a_machine_method_fails() -> None:
    (found,) = messages_of('machine.wait_until_succeeds("true", timeout="60")')
    assert found.startswith('mypy: test-script:2: error: Argument "timeout" to "wait_until_succeeds"'), found
    assert 'incompatible type "str"; expected "int"' in found


def test_a_misspelt_machine_method_fails() -> None:
    (found,) = messages_of('machine.succed("true")')
    assert found.startswith('mypy: test-script:2: error: "QemuMachine" has no attribute "succed"'), found


def test_an_implicit_optional_fails_as_with_no_implicit_optional() -> None:
    (found,) = messages_of("def f(x: int = None) -> int:\n    return 1\nf()")
    assert "Incompatible default for" in found, found


def test_a_syntax_error_fails() -> None:
    found = messages_of('machine.succeed("true"')
    assert any(m.startswith("pyflakes: test-script:2:") for m in found), found
    assert any(m.startswith("mypy: ") for m in found), found


def test_the_machine_api_the_scripts_use_is_declared_with_its_signatures() -> None:
    script = """
machine.start()
machine.wait_for_unit("a.service", timeout=60)
machine.wait_for_unit("a.service", "alice")
machine.wait_for_file("/x", timeout=10)
machine.wait_for_open_port(80, timeout=10)
machine.wait_for_closed_port(80, "127.0.0.1")
out: str = machine.succeed("a", "b", timeout=None)
out = machine.fail("false")
status, out = machine.execute("true", check_return=False, timeout=None)
out = machine.wait_until_succeeds("true", timeout=10)
out = machine.wait_until_fails("false")
status, out = machine.systemctl("restart a.service", user="alice")
info: dict[str, str] = machine.get_unit_info("a.service")
out = machine.get_unit_property("a.service", "ActiveState")
machine.require_unit_state("a.service", "inactive")
machine.sleep(1)
machine.log("hello")
machine.copy_from_host("/etc/hosts", "/tmp/hosts")
machine.copy_from_machine("/tmp/hosts")
machine.send_chars("hello\\n")
machine.screenshot("screen")
machine.wait_for_console_text("login:")
machine.reboot()
machine.crash()
machine.shutdown()
"""
    assert lint(script, ["machine"]) == []


def test_every_driver_symbol_is_known_to_both_tools() -> None:
    script = "\n".join(f"print({name})" for name in DRIVER_SYMBOLS)
    script += '\nwith subtest("one"):\n    start_all()\nretry(lambda last: True, timeout_seconds=5)\n'
    script += 't.assertEqual(os.sep, "/")\nfor m in machines:\n    m.wait_for_unit("default.target")\n'
    assert lint(script, ["machine"]) == []


def test_a_name_outside_the_drivers_symbols_is_undefined() -> None:
    # `Machine` was a driver symbol before the QEMU and nspawn machines split: no longer.
    found = lint("print(Machine)\n", ["machine"])
    assert "pyflakes: test-script:1:7: undefined name 'Machine'" in found


# Machine names, as driver.nix makes Python names of them.


def test_a_machine_name_with_a_dash_is_pythonized() -> None:
    assert pythonize_name("web-server") == "web_server"
    assert lint('web_server.succeed("true")\n', ["web-server", "db"]) == []
    found = lint('web-server.succeed("true")\n', ["web-server", "db"])
    assert "pyflakes: test-script:1:1: undefined name 'web'" in found


def test_pythonize_name_follows_driver_nix() -> None:
    assert pythonize_name("1st.node") == "_st_node"
    assert pythonize_name("_a9") == "_a9"
    assert pythonize_name("9") == "_"
    assert pythonize_name("a^b") == "a^b"  # Nix's `[A-z]` is the ASCII range A..z, `^` inside it


def test_a_single_machine_is_also_called_machine() -> None:
    assert machine_symbols(["server"]) == ["server", "machine"]
    assert machine_symbols(["machine"]) == ["machine"]
    assert machine_symbols(["a", "b"]) == ["a", "b"]
    assert lint('machine.succeed("true")\nserver.succeed("true")\n', ["server"]) == []
    found = lint('machine.succeed("true")\n', ["a", "b"])
    assert "pyflakes: test-script:1:1: undefined name 'machine'" in found


def test_machines_are_qemu_machines_for_mypy() -> None:
    (found,) = lint("web_server.switch_rot()\nweb_server.switch_root()\n", ["web-server", "db"])
    assert '"QemuMachine" has no attribute "switch_rot"' in found
