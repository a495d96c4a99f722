"""Workers as Ray actors across a Ray cluster's nodes (``stress run --ray [ADDRESS]``).

Ray places the workers and owns their processes; nothing else of the run changes. Each
actor runs the same ``stress.runtime.worker`` as a local ``--workers`` subprocess, and reaches the
driver (this process, which keeps the run directory, the live view and the stop logic)
over one TCP connection instead of two pipes: frames both ways, the same messages
(``stress.store.wire``), a request's start notice written before the request is sent. The
driver listens on the address Ray knows for its node, on a port of the system's choosing;
each actor is given a token of its own and must say it first, so nothing else can join.

Ray's object store carries nothing of the run: an actor's arguments are the driver's
address and its token. The config (the API key in its headers included) goes on the
connection, as over a pipe; the corpus documents too, so a node needs no copy of the
driver's files. Every process of one machine reads one CLOCK_MONOTONIC; across machines
each worker measures the driver's clock against its own before the run (``sync_clock``)
and stamps its times on the driver's run clock, with the skew and round trip in the
manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import platform
import secrets
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import stress
from stress.core.errors import StressError
from stress.core.secrets import REDACTOR
from stress.load.corpus import corpus_files, has_text
from stress.store.wire import read_frame

PLACE_TIMEOUT_S = 120.0
"""How long the actors may take to be placed and to connect (Ray waits for free CPUs
without end; a cluster that has none says so here instead)."""
HELLO_TIMEOUT_S = 10.0
"""How long a connection may take to say who it is."""
CORPUS_MAX_BYTES = 64 << 20
"""The most corpus text shipped to the nodes with each worker's config."""
_FIX_INSTALL = (
    "install the same stress with its ray extra on every node: pip install '.[ray]' in a "
    "checkout of the same commit"
)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise StressError(
            f"--ray needs Ray, which is not installed here -- fix: {_FIX_INSTALL}"
        ) from None
    return ray


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return REDACTOR.text(text[0] if text else type(e).__name__)[:300]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _StressWorker:
    """The actor: one ``stress.runtime.worker`` for the length of one call of ``run``."""

    def run(self, host: str, port: int, token: str) -> int:
        import ray

        from stress.runtime.worker import run_connected

        ctx = ray.get_runtime_context()
        info = {
            "node": ctx.get_node_id(),
            "host": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            "stress": stress.__version__,
            "python": platform.python_version(),
        }
        return run_connected(host, port, ["hello", os.getpid(), token, info])


class RayLink:
    """The driver's side of one Ray worker: its connection, its actor, its end."""

    def __init__(
        self,
        ray: Any,
        actor: Any,
        ended: asyncio.Future[Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pid: int,
        info: dict[str, Any],
    ) -> None:
        self._ray, self.actor = ray, actor
        self.reader, self.writer = reader, writer
        self.pid = pid
        self.info = {k: info.get(k) for k in ("node", "host", "ip")}
        self._why: str | None = None
        self.ended = ended
        """The actor's ``run`` call: its exit status, or Ray's error when it died."""
        ended.add_done_callback(self._on_end)

    def _on_end(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        self._why = f"Ray: {_first_line(fut.exception())}"  # type: ignore[arg-type]
        # its node may be gone without closing the connection: end the stream here
        self.reader.feed_eof()
        self.writer.close()

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(self.actor, no_restart=True)

    async def wait(self) -> int | None:
        try:
            return int(await self.ended)
        except Exception:
            return None

    async def errors(self, lines: deque[str]) -> None:
        return None  # an actor's stderr is in Ray's logs on its node

    def why(self) -> str | None:
        return self._why


class RayLauncher:
    """Joins a running Ray cluster (``connect``) and starts a run's workers on it."""

    def __init__(self, ray: Any, address: str) -> None:
        self.ray = ray
        self.address = address
        self.links: list[RayLink] = []
        self._server: asyncio.Server | None = None
        self._waiting: dict[str, asyncio.Future[tuple[Any, ...]]] = {}

    @classmethod
    def connect(cls, address: str | None) -> RayLauncher:
        """Join the cluster at ``address`` (None: the one ``ray start`` made on this
        machine, or ``RAY_ADDRESS``); one line when Ray or the cluster is missing."""
        ray = _ray()
        where = address or os.environ.get("RAY_ADDRESS") or "auto"
        host, _, port = where.rpartition(":")
        if host and port.isdigit() and "://" not in where:  # answer at once, not after retries
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except OSError as e:
                raise StressError(
                    f"--ray {where}: no Ray cluster answers there ({e.strerror or e}) -- fix: "
                    "start one with `ray start --head` (docs/scaling.md) or pass its address"
                ) from None
        try:
            ray.init(address=where, logging_level=logging.ERROR, log_to_driver=False)
        except Exception as e:
            raise StressError(
                f"--ray {where}: cannot join the Ray cluster ({_first_line(e)}) -- fix: start "
                "one with `ray start --head` (docs/scaling.md) or pass its address"
            ) from None
        return cls(ray, where)

    @property
    def cpus(self) -> int:
        """The cluster's CPUs (Ray's logical ones): one worker each at most."""
        return int(self.ray.cluster_resources().get("CPU", 0))

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {"node": n["NodeID"], "ip": n["NodeManagerAddress"], "cpus": n["Resources"].get("CPU")}
            for n in self.ray.nodes()
            if n.get("Alive")
        ]

    def check(self, workers: int, target_url: str) -> None:
        """One line, before anything starts, for what cannot work on this cluster."""
        if workers > self.cpus:
            raise StressError(
                f"--ray: {workers} workers need {workers} CPUs of the Ray cluster and it has "
                f"{self.cpus} -- fix: pass --workers {max(self.cpus, 1)} or add nodes"
            )
        host = urlsplit(target_url).hostname or ""
        me = self.ray.util.get_node_ip_address()
        away = sorted({n["ip"] for n in self.nodes() if n["ip"] != me and not _loopback(n["ip"])})
        if _loopback(host) and away:
            raise StressError(
                f"--ray: the target {host} is this machine's loopback, which the nodes at "
                f"{', '.join(away)} cannot reach -- fix: give the target by an address every "
                "node can reach"
            )

    def prepare(self, config: dict[str, Any]) -> dict[str, Any]:
        """The workers' config with the corpus documents in it (a node has no copy of
        the driver's files) and the clock to be synced (another machine's clock)."""
        out = {**config, "sync_clock": True}
        root = config.get("corpus")
        if root:
            path = Path(root)
            files: dict[str, str] = {}
            size = 0
            for doc in corpus_files(path):
                if has_text(doc):
                    rel = "" if path.resolve().is_file() else str(doc.relative_to(path.resolve()))
                    files[rel] = doc.read_text(encoding="utf-8", errors="replace")
                    size += len(files[rel])
            if size > CORPUS_MAX_BYTES:
                raise StressError(
                    f"--ray: the corpus {root} holds {size >> 20} MiB of text; at most "
                    f"{CORPUS_MAX_BYTES >> 20} MiB is shipped to the nodes -- fix: a smaller corpus"
                )
            out |= {"corpus": None, "corpus_files": files, "corpus_root": path.resolve().name}
        return out

    async def launch(self, n: int) -> list[Any]:
        """Start ``n`` actors spread over the nodes and wait until each has connected and
        said its token; one line (and no actor left) when any cannot."""
        loop = asyncio.get_running_loop()
        host = self.ray.util.get_node_ip_address()
        self._server = await asyncio.start_server(self._accept, host, 0, limit=1 << 22)
        port = self._server.sockets[0].getsockname()[1]
        actor_class = self.ray.remote(num_cpus=1, max_restarts=0)(_StressWorker)
        started = []
        for _ in range(n):
            token = secrets.token_hex(16)
            self._waiting[token] = loop.create_future()
            actor = actor_class.options(scheduling_strategy="SPREAD").remote()
            started.append((token, actor, actor.run.remote(host, port, token)))
        deadline = time.monotonic() + PLACE_TIMEOUT_S
        try:
            for k, (token, actor, ref) in enumerate(started):
                hello = self._waiting[token]
                ended = asyncio.wrap_future(ref.future())
                await asyncio.wait(
                    [hello, ended],
                    timeout=max(0.0, deadline - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not hello.done():
                    if ended.done() and ended.exception() is not None:
                        why = _first_line(ended.exception())  # type: ignore[arg-type]
                        raise StressError(
                            f"--ray: worker {k} could not start ({why}) -- fix: {_FIX_INSTALL}"
                        )
                    raise StressError(
                        f"--ray: {k} of {n} workers had started after {PLACE_TIMEOUT_S:.0f} s "
                        f"(the cluster has {self.cpus} CPUs) -- fix: pass fewer --workers, "
                        "or free or add nodes"
                    )
                reader, writer, pid, info = hello.result()
                if info.get("stress") != stress.__version__:
                    writer.close()
                    raise StressError(
                        f"--ray: node {info.get('host')} ({info.get('ip')}) runs stress "
                        f"{info.get('stress')}, this machine {stress.__version__} -- fix: "
                        f"{_FIX_INSTALL}"
                    )
                self.links.append(RayLink(self.ray, actor, ended, reader, writer, pid, info))
        except BaseException:
            for _, actor, _ in started:
                with contextlib.suppress(Exception):
                    self.ray.kill(actor, no_restart=True)
            raise
        return self.links

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        msgs: list[Any] | None = None
        with contextlib.suppress(TimeoutError, ValueError):
            msgs = await asyncio.wait_for(read_frame(reader), HELLO_TIMEOUT_S)
        hello: list[Any] = msgs[0] if msgs and isinstance(msgs[0], list) else []
        fut = None
        if len(hello) == 4 and hello[0] == "hello":
            fut = self._waiting.get(str(hello[2]))
        if fut is None or fut.done():  # not one of ours: a stranger, or a token said twice
            writer.close()
            return
        fut.set_result((reader, writer, int(hello[1]), dict(hello[3])))

    async def close(self) -> None:
        """After the workers' bye: free their CPUs, stop listening, leave the cluster."""
        for link in self.links:
            link.kill()
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(Exception):
            self.ray.shutdown()
