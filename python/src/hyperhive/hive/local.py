"""The hive on one host: a Unix socket per agent, `<dir>/<name>/hive.sock` (hive/transport.py's seam).

No server beyond the agents' own services. Who writes is known from the kernel, not from what they say:
the socket's peer credentials (SO_PEERCRED) give the connecting process's uid and pid, and a request "from
A" is taken only from A's user (the roster names it) and only from the process that listens on A's own
socket: A's service. The recipient learns that pid by connecting to A's socket (the listener's credentials,
as the kernel recorded them at listen()), once, and again whenever a request's pid differs. So another
local user cannot pose as A, and neither can a process of A's user that is not its service (a task the
agent runs): only the service writes as A, through its ledger and its guards. The directory a socket lives
in must belong to its agent's user, or the socket is not trusted either: nobody else can put a socket there.
What remains to A's user is A's user's: a task of A that stops A's service and listens in its place is A.

One request a connection: a JSON line (`op`, `from`, and the envelope), answered by one JSON line
(`ok`, and the answer or `refused`). Every read is bounded in size and time.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import ValidationError

from hyperhive.errors import HyperhiveError
from hyperhive.hive.envelope import Message, PeerState, Receipt, Stored
from hyperhive.hive.transport import Inbound, Refused, Unreachable
from hyperhive.jsontext import Refused as JsonRefused
from hyperhive.jsontext import loads
from hyperhive.roster import Roster

if TYPE_CHECKING:
    from hyperhive.hive.presence import Presence

log = logging.getLogger("hyperhive.hive")

MAX_LINE = 512 * 1024  # a 64 KiB body, every character escaped (6 bytes), and the envelope
CONNECT_WAIT = 5.0
ANSWER_WAIT = 10.0
READ_WAIT = 5.0  # for a request's line, once connected
MAX_CONNECTIONS = 64
SOCKET = "hive.sock"


class HiveSocketError(HyperhiveError):
    """This agent's socket directory cannot be used (not ours, a link, writable by others)."""


def peer_credentials(stream: SocketStream) -> tuple[int, int] | None:
    """The (pid, uid) the kernel holds for the other end: the connecting process's, or the listener's as
    it was at listen(); None when the stream is not a Unix socket."""
    try:
        raw = stream.extra(SocketAttribute.raw_socket)
    except anyio.TypedAttributeLookupError:
        return None
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


class LocalTransport:
    """Agent `me`'s way to the others of `roster`, and theirs to it."""

    def __init__(self, roster: Roster, me: str) -> None:
        self.roster = roster
        self.me = me
        self._limit = anyio.Semaphore(MAX_CONNECTIONS)
        self._services: dict[str, int] = {}  # another agent's name → the pid its socket was last seen served by

    # -- asking another agent ------------------------------------------------------------------------

    async def deliver(self, message: Message) -> Stored:
        answer = await self._ask(message.recipient, {"op": "message", "message": message.model_dump()})
        try:
            return Stored.model_validate(answer)
        except ValidationError as exc:
            raise Unreachable(f"{message.recipient}'s answer was not understood", recipient=message.recipient) from exc

    async def receipt(self, recipient: str, receipt: Receipt) -> None:
        await self._ask(recipient, {"op": "receipt", "receipt": receipt.model_dump()})

    async def state(self, name: str) -> PeerState:
        answer = await self._ask(name, {"op": "state"})
        try:
            return PeerState.model_validate(answer)
        except ValidationError as exc:
            raise Unreachable(f"{name}'s answer was not understood", recipient=name) from exc

    async def check(self, to: str) -> str | None:
        return None  # the roster's checks are all there is on one host (HiveNode.send makes them)

    async def directory(self) -> list[Presence]:
        return []

    def link(self) -> None:
        """No broker on one host."""
        return None

    async def _connect(self, name: str) -> SocketStream:
        path = self._trusted_socket(name)
        try:
            with anyio.fail_after(CONNECT_WAIT):
                return await anyio.connect_unix(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Unreachable(f"{name}'s service is not running (no one listens on {path})", recipient=name) from exc
        except TimeoutError as exc:
            raise Unreachable(
                f"{name}'s service did not take the connection within {CONNECT_WAIT:g} s", recipient=name
            ) from exc
        except OSError as exc:
            raise Unreachable(f"cannot reach {name} at {path}: {exc.strerror}", recipient=name) from exc

    async def _ask(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        stream = await self._connect(name)
        async with stream:
            try:
                with anyio.fail_after(ANSWER_WAIT):
                    await stream.send(_dump({**request, "from": self.me}))
                    line = await BufferedByteReceiveStream(stream).receive_until(b"\n", MAX_LINE)
            except TimeoutError as exc:
                raise Unreachable(f"{name}'s service did not answer within {ANSWER_WAIT:g} s", recipient=name) from exc
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError) as exc:
                raise Unreachable(f"{name}'s service closed the connection before answering", recipient=name) from exc
            except anyio.DelimiterNotFound as exc:
                raise Unreachable(f"{name}'s answer was over {MAX_LINE} bytes", recipient=name) from exc
        try:
            answer = loads(line)
        except (JsonRefused, ValueError) as exc:
            raise Unreachable(f"{name}'s answer was not JSON", recipient=name) from exc
        if not isinstance(answer, dict):
            raise Unreachable(f"{name}'s answer was not an object", recipient=name)
        if answer.get("ok") is not True:
            reason = answer.get("refused")
            raise Refused(str(reason)[:500] if reason else f"{name} refused it", recipient=name)
        result = answer.get("answer", {})
        return result if isinstance(result, dict) else {}

    def _trusted_socket(self, name: str) -> Path:
        """`name`'s socket, if its directory is its user's: Unreachable otherwise (say, not running yet)."""
        agent = self.roster.get(name)
        if agent is None:
            raise Refused(f"there is no agent {name!r} on this host", recipient=name)
        directory = self.roster.socket_dir(name)
        try:
            info = os.lstat(directory)
        except OSError as exc:
            raise Unreachable(f"{name}'s service is not running ({directory}: {exc.strerror})", recipient=name) from exc
        uid = agent.uid()
        if not stat.S_ISDIR(info.st_mode) or uid is None or info.st_uid != uid:
            raise Unreachable(
                f"{directory} is not {name}'s (not a directory of its user {agent.user}): not trusted, not used",
                recipient=name,
            )
        return directory / SOCKET

    # -- being asked ---------------------------------------------------------------------------------

    def prepare(self) -> Path:
        """This agent's socket directory, made when missing; HiveSocketError when it is not ours alone to write."""
        directory = self.roster.socket_dir(self.me)
        try:
            directory.mkdir(mode=0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise HiveSocketError(
                f"cannot make the hive socket directory {directory}: {exc.strerror}"
                f" (on NixOS the unit's RuntimeDirectory makes it)",
                path=str(directory),
            ) from exc
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise HiveSocketError(
                f"{directory} must be a directory of this service's user that no one else may write"
                f" (it is mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid})",
                path=str(directory),
            )
        path = directory / SOCKET
        path.unlink(missing_ok=True)  # a socket our previous run left (one service per agent: the lock says so)
        return path

    async def serve(
        self, inbound: Inbound, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        path = self.prepare()
        listener = await anyio.create_unix_listener(path)
        os.chmod(path, 0o666)  # anyone may connect; who they are is judged per request (SO_PEERCRED)
        task_status.started()
        async with listener, anyio.create_task_group() as tg:
            while True:
                stream = await listener.accept()
                tg.start_soon(self._one, stream, inbound)

    async def _one(self, stream: SocketStream, inbound: Inbound) -> None:
        async with stream:
            if self._limit.value == 0:
                await _answer(stream, {"ok": False, "refused": f"{self.me} is busy: too many connections"})
                return
            async with self._limit:
                try:
                    with anyio.fail_after(READ_WAIT):
                        line = await BufferedByteReceiveStream(stream).receive_until(b"\n", MAX_LINE)
                except (
                    TimeoutError,
                    anyio.EndOfStream,
                    anyio.IncompleteRead,
                    anyio.DelimiterNotFound,
                    anyio.BrokenResourceError,
                    OSError,
                ):
                    return
                answer = await self._handle(stream, line, inbound)
                await _answer(stream, answer)

    async def _handle(self, stream: SocketStream, line: bytes, inbound: Inbound) -> dict[str, Any]:
        try:
            request = loads(line)
        except (JsonRefused, ValueError):
            return {"ok": False, "refused": "the request is not JSON"}
        if not isinstance(request, dict):
            return {"ok": False, "refused": "the request is not an object"}
        claimed = request.get("from")
        sender = claimed if isinstance(claimed, str) else ""
        agent = self.roster.get(sender)
        peer = peer_credentials(stream)
        if agent is None or peer is None or peer[1] != agent.uid():
            who = "a process" if peer is None else f"a process of uid {peer[1]}"
            log.warning("hive: %s posed as %r and was refused", who, sender[:40])
            return {"ok": False, "refused": f"{who} is not agent {sender[:40]!r}'s user"}
        op = request.get("op")
        if op in ("message", "receipt") and not await self._is_service_of(sender, peer[0]):
            log.warning("hive: pid %d of %s's user, not its service, wrote as it and was refused", peer[0], sender)
            return {
                "ok": False,
                "refused": f"pid {peer[0]} is not {sender}'s service (the process serving its hive socket): "
                f"only the service writes as {sender}",
            }
        try:
            if op == "message":
                message = Message.model_validate(request.get("message"))
                if message.sender != sender or message.recipient != self.me:
                    return {"ok": False, "refused": "the message's sender or recipient is not this connection's"}
                stored = await inbound.message(sender, message)
                return {"ok": True, "answer": stored.model_dump()}
            if op == "receipt":
                receipt = Receipt.model_validate(request.get("receipt"))
                if receipt.reader != sender:
                    return {"ok": False, "refused": "the receipt's reader is not this connection's"}
                await inbound.receipt(sender, receipt)
                return {"ok": True}
            if op == "state":
                return {"ok": True, "answer": (await inbound.state(sender)).model_dump()}
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            return {"ok": False, "refused": f"malformed {op}: {problems}"}
        except Refused as exc:
            return {"ok": False, "refused": exc.message}
        return {"ok": False, "refused": f"unknown op {str(op)[:40]!r}"}

    async def _is_service_of(self, name: str, pid: int) -> bool:
        """Whether `pid` serves `name`'s socket: as last seen, or as the kernel says now (a connection to it,
        closed at once; its listener's credentials)."""
        if pid > 0 and self._services.get(name) == pid:
            return True
        try:
            stream = await self._connect(name)
        except (Unreachable, Refused):
            return False
        async with stream:
            listener = peer_credentials(stream)
        if listener is None:
            return False
        self._services[name] = listener[0]
        return pid > 0 and listener[0] == pid


async def _answer(stream: SocketStream, answer: dict[str, Any]) -> None:
    try:
        with anyio.fail_after(READ_WAIT):
            await stream.send(_dump(answer))
    except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
