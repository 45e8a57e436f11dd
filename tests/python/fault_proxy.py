"""A TCP proxy on 127.0.0.1 that cuts connections at seeded byte offsets.

FaultProxy forwards every connection it accepts to an upstream address
(changeable: a restarted server on a new port). While cutting, each
direction (client-to-server "c2s", server-to-client "s2c") has its own
seeded RNG that draws the byte offset of its next cut, counted over all the
bytes that direction carried: when a read crosses it, the bytes up to the
offset are forwarded and then BOTH sockets of the connection are closed,
with a reset (SO_LINGER 0) or a plain close, also drawn from the RNG. An
HTTP/2 frame tracker per direction tells whether a cut fell inside a DATA
frame's payload, i.e. in the middle of a gRPC message (a batch or a reply).

The proxy runs an asyncio loop in a daemon thread; its methods are called
from the test's thread. close() stops it and every connection.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from typing import Dict, Optional, Set, Tuple

DIRECTIONS = ("c2s", "s2c")
_PREFACE = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
_DATA_FRAME = 0


class _Frames:
    """Follows the HTTP/2 frames of one direction of one connection."""

    def __init__(self, preface: int) -> None:
        self.skip = preface
        self.header = b""
        self.left = 0  # payload bytes of the current frame still to come
        self.type: Optional[int] = None

    def feed(self, data: bytes) -> None:
        i = 0
        while i < len(data):
            if self.skip:
                n = min(self.skip, len(data) - i)
                self.skip -= n
                i += n
            elif self.left == 0:
                take = data[i : i + 9 - len(self.header)]
                self.header += take
                i += len(take)
                if len(self.header) == 9:
                    self.left = int.from_bytes(self.header[:3], "big")
                    self.type = self.header[3] if self.left else None
                    self.header = b""
            else:
                n = min(self.left, len(data) - i)
                self.left -= n
                i += n
                if self.left == 0:
                    self.type = None

    def in_data_payload(self) -> bool:
        return self.type == _DATA_FRAME and self.left > 0


class _Pair:
    """The two transports of one proxied connection."""

    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client
        self.upstream: Optional[asyncio.Transport] = None
        self.dead = False

    def kill(self, reset: bool) -> None:
        if self.dead:
            return
        self.dead = True
        for transport in (self.client, self.upstream):
            if transport is None:
                continue
            sock = transport.get_extra_info("socket")
            if reset and sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            transport.abort()


class FaultProxy:
    """See the module docstring. Counters: cuts, mid_message_cuts and
    bytes per direction, connections accepted."""

    def __init__(self, upstream: str, seed: int = 0) -> None:
        self.upstream = upstream
        self.seed = seed
        self.cutting = False
        self.gaps: Dict[str, Tuple[int, int]] = {d: (1 << 62, 1 << 62) for d in DIRECTIONS}
        self.max_cuts: Dict[str, int] = {d: 0 for d in DIRECTIONS}
        self.cuts = {d: 0 for d in DIRECTIONS}
        self.mid_message_cuts = {d: 0 for d in DIRECTIONS}
        self.bytes = {d: 0 for d in DIRECTIONS}
        self.connections = 0
        self._rngs = {d: random.Random(f"{seed}-{d}") for d in DIRECTIONS}
        self._next_cut = {d: 1 << 62 for d in DIRECTIONS}
        self._pairs: Set[_Pair] = set()
        self._loop = asyncio.new_event_loop()
        self._server: Optional[asyncio.AbstractServer] = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the fault proxy did not start within 10 s")
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"

    # -- called from the test's thread -----------------------------------

    def start_cutting(self, gaps: Dict[str, Tuple[int, int]], max_cuts: Dict[str, int]) -> None:
        """Cuts each direction after a number of bytes drawn uniformly from
        gaps[d] (counted from now, then from each cut), at most max_cuts[d]
        times."""
        self._call(self._start_cutting, gaps, max_cuts)

    def stop_cutting(self) -> None:
        self._call(setattr, self, "cutting", False)

    def set_upstream(self, upstream: str) -> None:
        self._call(setattr, self, "upstream", upstream)

    def cut_all(self) -> None:
        """Resets every open connection now."""
        self._call(self._cut_all)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._cut_all)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the loop's side ---------------------------------------------------

    def _call(self, fn, *args) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn(*args)
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError("the fault proxy's loop did not answer within 10 s")

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        started.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    def _start_cutting(self, gaps, max_cuts) -> None:
        self.gaps = dict(gaps)
        self.max_cuts = dict(max_cuts)
        for d in DIRECTIONS:
            self._next_cut[d] = self.bytes[d] + self._rngs[d].randint(*self.gaps[d])
        self.cutting = True

    def _cut_all(self) -> None:
        for pair in list(self._pairs):
            pair.kill(reset=True)

    def _cut_offset(self, d: str, n: int) -> Optional[int]:
        """Where in the next `n` bytes of direction `d` to cut (None: not
        in them); counts the bytes that pass."""
        if not self.cutting or self.cuts[d] >= self.max_cuts[d]:
            self.bytes[d] += n
            return None
        at = self._next_cut[d] - self.bytes[d]
        if at >= n:
            self.bytes[d] += n
            return None
        at = max(at, 0)
        self.bytes[d] += at
        self._next_cut[d] = self.bytes[d] + self._rngs[d].randint(*self.gaps[d])
        return at

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        pair = _Pair(writer.transport)
        self._pairs.add(pair)
        try:
            host, port = self.upstream.rsplit(":", 1)
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
            except OSError:
                return  # the server is down: the client sees its connection closed
            pair.upstream = up_writer.transport
            await asyncio.gather(
                self._pump(pair, reader, up_writer, "c2s"),
                self._pump(pair, up_reader, writer, "s2c"),
            )
        finally:
            pair.kill(reset=False)
            self._pairs.discard(pair)

    async def _pump(self, pair: _Pair, reader, writer, d: str) -> None:
        frames = _Frames(_PREFACE if d == "c2s" else 0)
        try:
            while not pair.dead:
                data = await reader.read(65536)
                if not data or pair.dead:
                    break
                at = self._cut_offset(d, len(data))
                if at is None:
                    frames.feed(data)
                    writer.write(data)
                    await writer.drain()
                    continue
                frames.feed(data[:at])
                writer.write(data[:at])
                for _ in range(100):  # let the bytes before the cut leave
                    if writer.transport.get_write_buffer_size() == 0:
                        break
                    await asyncio.sleep(0.001)
                self.cuts[d] += 1
                if frames.in_data_payload():
                    self.mid_message_cuts[d] += 1
                pair.kill(reset=self._rngs[d].random() < 0.5)
                break
        except (ConnectionError, OSError):
            pass
        finally:
            pair.kill(reset=False)
