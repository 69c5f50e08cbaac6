# The typing prelude tests/nix/driver_lint.py puts before a VM test script for mypy, in the place of
# nixpkgs' nixos/lib/test-script-prepend.py: it declares, with their types, the names the driver
# hands every test script (Driver.test_symbols, listed in driver_lint.DRIVER_SYMBOLS). The machine
# names (`machine: QemuMachine;`) follow it, as driver.nix writes them. Never executed: the names are
# declared, not bound, and some imports are there only for the script (os, retry, BaseMachine).
# ruff: noqa: F401, F821
import os
from contextlib import AbstractContextManager
from typing import Protocol

from test_driver.debug import DebugAbstract
from test_driver.driver import AssertionTester, Driver
from test_driver.logger import AbstractLogger
from test_driver.machine import BaseMachine, NspawnMachine, QemuMachine, retry
from test_driver.vlan import VLan


class _Subtest(Protocol):
    def __call__(self, name: str) -> AbstractContextManager[None]: ...


driver: Driver
machines: list[QemuMachine | NspawnMachine]
machines_qemu: list[QemuMachine]
machines_nspawn: list[NspawnMachine]
vlans: list[VLan]
log: AbstractLogger
t: AssertionTester
debug: DebugAbstract
subtest: _Subtest
# The driver's bound methods, with the Driver's signatures.
start_all = driver.start_all
test_script = driver.test_script
run_tests = driver.run_tests
join_all = driver.join_all
create_machine = driver.create_machine
serial_stdout_off = driver.serial_stdout_off
serial_stdout_on = driver.serial_stdout_on
polling_condition = driver.polling_condition
dump_machine_ssh = driver.dump_machine_ssh
