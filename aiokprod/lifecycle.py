"""The producer's lifecycle: start, the root task, crash handling and close.

The base of :class:`~aiokprod.producer.Producer`, kept apart so that ``producer.py`` reads
as the public sending API. States: NEW -> RUNNING -> CLOSING -> CLOSED, or CRASHED when a
background task fails (every pending record fails with :class:`ProducerCrashedError`, and so
does every later call). The producer owns one root task; inside it the runtime's task group
runs the sender loop and one read task per broker connection, so nothing outlives
:meth:`ProducerLifecycle.close`.
"""

from __future__ import annotations

import _thread
import asyncio
import enum
from types import TracebackType
from typing import Self

import anyio

from aiokprod.errors import (
    IllegalStateError,
    KafkaError,
    ProducerClosedError,
    ProducerCrashedError,
)
from aiokprod.internals.runtime import ProducerRuntime
from aiokprod.internals.send_path import SendPath
from aiokprod.logs import get_logger
from aiokprod.transactional import TransactionalMixin

log = get_logger("aiokprod.producer")


class ProducerState(enum.Enum):
    """Where a producer is in its life (the module docstring has the transitions)."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"
    CRASHED = "crashed"


class ProducerLifecycle(TransactionalMixin):
    """Start, run, crash and close (see the module docstring); the producer's base class."""

    _rt: ProducerRuntime

    def __init__(self, runtime: ProducerRuntime) -> None:
        self._rt = runtime
        #: The per-record send, which also holds the per-record gate: ``open`` (RUNNING) and
        #: ``thread_id``, the thread whose event loop started the producer: sends from any
        #: other thread are refused. (A thread id, not the loop: asyncio.get_running_loop()
        #: costs a getpid() system call per call before Python 3.12, too much per record.)
        self._path = SendPath(runtime, self._not_running, self._wrong_loop, self._pass_crashed)
        self._state = ProducerState.NEW
        self._runner: asyncio.Task[None] | None = None
        self._crash: ProducerCrashedError | None = None
        self._closed_error: KafkaError = ProducerClosedError("the producer is closed")

    @property
    def _state(self) -> ProducerState:
        return self._state_value

    @_state.setter
    def _state(self, state: ProducerState) -> None:
        self._state_value = state
        #: ``state is RUNNING`` as a plain bool: the per-record check (an Enum member lookup
        #: costs ~70 ns on Python 3.11, a bool attribute ~10).
        self._path.open = state is ProducerState.RUNNING

    # --- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the background sender. It does not wait for the cluster to be reachable.

        Brokers that are down at start are retried; ``send()`` waits up to
        ``max_block_ms`` for the metadata of its topic.

        Raises:
            IllegalStateError: already started, or closed.
        """
        if self._state is not ProducerState.NEW:
            raise IllegalStateError(f"start() on a producer that is {self._state.value}")
        loop = asyncio.get_running_loop()
        self._path.thread_id = _thread.get_ident()
        ready: asyncio.Future[None] = loop.create_future()
        self._runner = loop.create_task(self._run(ready), name="aiokprod-producer")
        await ready
        self._state = ProducerState.RUNNING
        if self._txn is not None:
            await self._init_transactions()

    async def _run(self, ready: asyncio.Future[None]) -> None:
        """The producer's root task: the runtime's task group, and what to do when it ends."""
        try:
            await self._rt.run(ready)
        except BaseException as exc:  # noqa: BLE001 - the root task: every ending is handled
            if not ready.done():
                ready.set_exception(exc)
                return
            if isinstance(exc, asyncio.CancelledError) and self._state is ProducerState.CLOSED:
                return
            self._on_crash(exc)

    def _pass_crashed(self, exc: Exception) -> KafkaError:
        """Crash the producer for a sender pass that raised in a caller's task.

        A pass that ``send_and_wait`` runs is the sender's: a bug there is a crash of the
        producer, whichever task ran it. Returns the error to raise in that task.
        """
        self._on_crash(exc)
        if self._runner is not None:
            self._runner.cancel()
        return self._not_running()

    def _on_crash(self, exc: BaseException) -> None:
        if self._crash is not None:
            return  # already crashed (a sender pass in a caller's task, then the runner)
        error = ProducerCrashedError(f"the producer's background task stopped: {exc!r}")
        error.__cause__ = exc
        self._crash = error
        self._state = ProducerState.CRASHED
        log.error("producer crashed", error=repr(exc))
        self._rt.crash(error)

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting records, deliver the ones accepted, and stop.

        Args:
            timeout: seconds to wait for delivery; None waits as long as it takes (each
                record is bounded by ``delivery_timeout_ms`` anyway); 0 gives up at once.
                Records still undelivered when it passes fail with ProducerClosedError.
                With acks=0 it also bounds the wait until the brokers have read what was
                written (one answered request per connection; ``request_timeout_ms`` when
                None): docs/delivery-guarantees.md, "What ``acks`` means".

        Raises:
            ProducerCrashedError: the background task had crashed (its records already
                failed with this error).

        Cancellation:
            Closing is shielded: a cancelled caller still leaves the producer closed, with
            every record delivered or failed.
        """
        if self._state in (ProducerState.NEW, ProducerState.CLOSED):
            self._state = ProducerState.CLOSED
            return
        if self._state is ProducerState.CLOSING:
            # Another close() is under way (or was cancelled half-way): finish it here.
            runner = self._runner
            if runner is not None:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([runner])
            self._state = ProducerState.CLOSED
            return
        crashed = self._state is ProducerState.CRASHED
        if not crashed:
            await self._abort_open_transaction()
            self._state = ProducerState.CLOSING
        rt = self._rt
        rt.fail_waiting(ProducerClosedError("the producer was closed while this send waited"))
        with anyio.CancelScope(shield=True):
            if not crashed:
                await rt.drain(timeout)
            runner = self._runner
            if runner is not None and not runner.done():
                self._state = ProducerState.CLOSED
                if crashed and rt.pool is not None:
                    rt.pool.close_all()
                # Else the runner closes the connections itself once the brokers read what
                # was written (acks=0; bounded by the close timeout: Runtime.run).
                await asyncio.wait([runner])
        self._state = ProducerState.CLOSED
        if crashed and self._crash is not None:
            raise self._crash

    def _check_running(self) -> None:
        """Raise if the producer stopped (or hit a fatal error) while a send awaited."""
        if not self._running():
            raise self._not_running()
        if self._rt.fatal_error is not None:
            raise self._rt.fatal_error

    def _wrong_loop(self) -> KafkaError:
        return IllegalStateError(
            "this producer belongs to the event loop it was started on; it was called from "
            "another loop (another thread?): use one producer per loop, or aiokprod.sync"
        )

    def _running(self) -> bool:
        # A method, not an inline comparison: the state changes across awaits.
        return self._path.open

    def _not_running(self) -> KafkaError:
        if self._state is ProducerState.CRASHED and self._crash is not None:
            return self._crash
        if self._state is ProducerState.NEW:
            return ProducerClosedError("the producer is not started: use 'async with' or start()")
        return self._rt.fatal_error or self._closed_error
