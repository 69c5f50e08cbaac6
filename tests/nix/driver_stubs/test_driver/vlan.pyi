from pathlib import Path

from test_driver.logger import AbstractLogger

class VLan:
    nr: int
    socket_dir: Path
    pid: int
    def __init__(self, nr: int, tmp_dir: Path, logger: AbstractLogger) -> None: ...
    def stop(self) -> None: ...
