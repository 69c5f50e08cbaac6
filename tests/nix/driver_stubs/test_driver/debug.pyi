from abc import ABC, abstractmethod

class DebugAbstract(ABC):
    @abstractmethod
    def breakpoint(self) -> None: ...

class DebugNop(DebugAbstract):
    def breakpoint(self) -> None: ...
