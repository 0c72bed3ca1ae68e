"""The driver's side of a Ray pool: its actors, which one takes each call (at most
max_inflight_per_actor each, the rest queued here, not in their mailboxes), and a dead actor
replaced before the next call.

Each command carries a token; as soon as its reply reaches the driver (whoever waits for it:
eval, map, execute, result(), or a caller's own ``ray.get`` of a submit()'s reference), the
driver tells its actor to end that command's checkout, without waiting for an answer
(pydeno/ray/_actor.py says why the actor holds it until then)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Final

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from .._base.errors import ActorDied
from .._base.stats import Stats, merge_dicts
from ._actor import CONTROL, ENDS, SandboxActor

# Actor options the pool decides itself: replacing a dead actor is the pool's (Ray's own
# restarts would replace it a second time), and admission is max_inflight_per_actor.
OWN_OPTIONS: Final = frozenset({"max_concurrency", "concurrency_groups", "max_restarts", "max_task_retries"})
# How long close() and stats() wait for an actor's answer before they give up on it.
CONTROL_WAIT: Final = 10.0

ActorClass = ray.remote(concurrency_groups={CONTROL: 2, ENDS: 1})(SandboxActor)  # type: ignore[call-overload]


def actor_died(index: int, what: str, ray_text: str) -> ActorDied:
    """The failure of a pool's actor that died (or that Ray lost) running ``what``: the one
    place its message is written. Ray's own account follows the host's prefix."""
    return ActorDied(
        f"Ray actor {index} died running {what}: {ray_text}",
        hint=(
            f"retry: the pool replaces actor {index} with a fresh one before its next command; if actors keep "
            "dying, check the nodes' memory and Ray's logs"
        ),
        _kind="actor_died",
    )


class _Slot:
    """One place in the pool: the actor serving it now and the commands it has in flight."""

    __slots__ = ("actor_id", "dead", "handle", "index", "inflight")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.actor_id: str = handle._actor_id.hex()
        self.inflight = 0
        self.dead = False


class Call:
    """A command sent to an actor: where it went, its reference and its future."""

    __slots__ = ("future", "ref", "slot")

    def __init__(self, slot: _Slot, ref: Any, future: Future[Any]) -> None:
        self.slot = slot
        self.ref = ref
        self.future = future


class Actors:
    """The actors of one pool: admission, replacement of the dead, and their figures.

    Everything here is under one condition; a command's reference completing (in a thread of
    Ray's) releases its place and wakes whoever waits for one.
    """

    def __init__(self, actors: int, limit: int, make: Callable[[int], Any], start_timeout: float, asks: str) -> None:
        self._make = make
        self.limit = limit
        self._cond = threading.Condition()
        self.closed = False
        self._turn = 0
        self.replaced = 0
        self.inflight = 0
        self.finished = 0
        self.waits = Stats()
        self._tokens = itertools.count()
        # Every actor this pool started, by Ray's id: which slot it served, what it last said.
        self._owners: dict[str, int] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._retired = Stats()
        self.slots: list[_Slot] = []
        try:
            for index in range(actors):
                self.slots.append(self._new(index))
            self._await_ready(start_timeout, asks)
        except BaseException:
            self._kill_all()
            raise

    def _new(self, index: int) -> _Slot:
        slot = _Slot(index, self._make(index))
        self._owners[slot.actor_id] = index
        return slot

    def _await_ready(self, start_timeout: float, asks: str) -> None:
        refs = [slot.handle.info.remote() for slot in self.slots]
        ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=start_timeout)
        for slot, ref in zip(self.slots, refs, strict=True):
            if ref in ready:
                try:
                    ray.get(ref)
                except RayActorError as exc:
                    raise actor_died(slot.index, "start", str(exc)) from exc
        if waiting:
            cpus = ray.cluster_resources().get("CPU", 0)  # type: ignore[no-untyped-call]
            raise TimeoutError(
                f"Ray placed {len(ready)} of the pool's {len(refs)} actors within start_timeout={start_timeout}s "
                f"(each asks for {asks}; the cluster has {cpus:g} CPUs): start fewer actors or workers per actor, "
                "add nodes, or raise start_timeout="
            )

    def _kill_all(self) -> None:
        for slot in self.slots:
            _kill(slot.handle)

    # -- admission ---------------------------------------------------------------------------
    def admit(self, *, block: bool = True, since: float | None = None) -> _Slot | None:
        """A place on the least busy actor (its command count taken), waiting for one when
        every actor is full; None instead of waiting when ``block`` is False. ``since``: when
        the command began to wait for it, if it waited before this call."""
        with self._cond:
            started = since
            while True:
                self._check_open()
                self._replace_dead()
                slot = self._pick()
                if slot is not None:
                    slot.inflight += 1
                    self.inflight += 1
                    if started is not None:
                        self.waits.record_queue_wait(time.monotonic() - started)
                    return slot
                if not block:
                    return None
                if started is None:
                    started = time.monotonic()
                self._cond.wait()

    def _pick(self) -> _Slot | None:
        best: _Slot | None = None
        n = len(self.slots)
        for k in range(n):
            slot = self.slots[(self._turn + k) % n]
            if not slot.dead and slot.inflight < self.limit and (best is None or slot.inflight < best.inflight):
                best = slot
        if best is not None:
            # Ties go round the actors, so that work spreads before any actor fills up.
            self._turn = (best.index + 1) % n
        return best

    def _replace_dead(self) -> None:
        for index, slot in enumerate(self.slots):
            if slot.dead:
                _kill(slot.handle)
                self._retire(slot.actor_id)
                self.slots[index] = self._new(index)
                self.replaced += 1

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the pool is closed")

    def has_room(self) -> bool:
        return any(slot.dead or slot.inflight < self.limit for slot in self.slots)

    def wait_for(self, running: Iterable[Future[Any]], *, room: bool, until: float | None) -> None:
        """Wait until one of ``running`` is done, (``room``) an actor has a free place, or
        the monotonic clock reaches ``until``."""
        with self._cond:
            while not any(f.done() for f in running) and not (room and (self.closed or self.has_room())):
                left = None if until is None else until - time.monotonic()
                if left is not None and left <= 0:
                    return
                self._cond.wait(left)

    # -- commands ----------------------------------------------------------------------------
    def dispatch(self, method: str, *args: Any, block: bool = True, since: float | None = None) -> Call | None:
        """Send a command to an admitted actor (None: no room, and ``block`` is False)."""
        slot = self.admit(block=block, since=since)
        if slot is None:
            return None
        token = next(self._tokens)
        try:
            ref = getattr(slot.handle, method).remote(*args, token=token)
            future = ref.future()
        except BaseException:
            self._release(slot, None)
            raise
        future.add_done_callback(functools.partial(self._finished, slot, token))
        return Call(slot, ref, future)

    def _finished(self, slot: _Slot, token: int, future: Future[Any]) -> None:
        """The reply is here (in a thread of Ray's): release the place, and have the actor
        end the command's checkout. An actor that died holds nothing more; a closed pool's
        actors ended every checkout as they closed."""
        error = future.exception()
        if not isinstance(error, RayActorError) and not self.closed:
            self.end(slot, token)
        self._release(slot, error)

    def end(self, slot: _Slot, token: int) -> None:
        """Tell slot's actor to end the checkout of the command given ``token``, without
        waiting: the reference is dropped, the call still runs."""
        with contextlib.suppress(Exception):
            slot.handle.end.remote(token)

    def _release(self, slot: _Slot, error: BaseException | None) -> None:
        with self._cond:
            slot.inflight -= 1
            self.inflight -= 1
            self.finished += 1
            if isinstance(error, RayActorError):
                self._mark_dead(slot)
            self._cond.notify_all()

    def _mark_dead(self, slot: _Slot) -> None:
        """The actor in slot died: the next admission replaces it (held: the condition)."""
        if self.slots[slot.index] is slot:
            slot.dead = True

    def settle(self, call: Call, what: str) -> tuple[Any, BaseException | None]:
        """A command's value, or the exception to raise for it: the pydeno exception the
        actor raised (not Ray's wrapper), or ActorDied."""
        try:
            return call.future.result(), None
        except RayTaskError as exc:
            return None, _cause(exc)
        except RayActorError as exc:
            # Marked here too: the callback that marks it may run after this thread wakes,
            # and a retry must not be admitted to the dead actor.
            with self._cond:
                self._mark_dead(call.slot)
            return None, _died(call.slot.index, what, exc)

    def unwrap(self, ref: Any, timeout: float | None) -> Any:
        """``ray.get(ref)``, raising the pydeno exception itself, or ActorDied."""
        try:
            return ray.get(ref, timeout=timeout)
        except RayTaskError as exc:
            error: BaseException = _cause(exc)
        except RayActorError as exc:
            index = self._owners.get(str(exc.actor_id))
            if index is None:
                raise
            error = _died(index, "eval", exc)
        raise error

    # -- figures and the end -----------------------------------------------------------------
    def _retire(self, actor_id: str, figures: Mapping[str, Any] | None = None) -> None:
        """Keep a gone actor's figures: those it gave at close, else the last it reported
        (held: the condition)."""
        last: Mapping[str, Any] | None = self._last.pop(actor_id, None)
        if figures is not None:
            last = figures
        if last is not None:
            self._retired.merge(last)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            live = [] if self.closed else [slot for slot in self.slots if not slot.dead]
        asked = [(slot, slot.handle.stats.remote()) for slot in live]
        per_actor: list[dict[str, Any]] = []
        for slot, ref in asked:
            try:
                figures = ray.get(ref, timeout=CONTROL_WAIT)
            except RayActorError:
                with self._cond:
                    self._mark_dead(slot)
                continue
            except GetTimeoutError:
                continue
            figures = {"index": slot.index, **figures}
            per_actor.append(figures)
            with self._cond:
                if not slot.dead and not self.closed:
                    self._last[slot.actor_id] = figures
        with self._cond:
            retired = self._retired.as_dict()
            out = merge_dicts([*per_actor, retired])
            # What the pool was asked and answered, and its own admission waits; each
            # actor's pool counts its workers' commands and its checkout waits.
            out["commands"] = self.finished
            out["queue_wait_seconds"] = self.waits.as_dict()["queue_wait_seconds"]
            out["actors"] = len(self.slots)
            out["actors_replaced"] = self.replaced
            out["inflight"] = self.inflight
            out["max_inflight_per_actor"] = self.limit
        out["per_actor"] = per_actor
        return out

    def close(self) -> None:
        with self._cond:
            if self.closed:
                return
            self.closed = True
            slots = list(self.slots)
            self._cond.notify_all()
        # Each actor kills its own workers (and reaps them) first; the kill that follows
        # ends the actor, and with it any worker a hung actor left (their parent-death signal).
        asked = [(slot, slot.handle.close.remote()) for slot in slots if not slot.dead]
        deadline = time.monotonic() + CONTROL_WAIT
        for slot, ref in asked:
            try:
                figures = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except (RayActorError, GetTimeoutError):
                figures = None
            with self._cond:
                self._retire(slot.actor_id, figures)
        for slot in slots:
            _kill(slot.handle)


def _kill(handle: Any) -> None:
    # An actor already gone, or Ray shut down: there is nothing left to end.
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def _cause(exc: RayTaskError) -> BaseException:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _died(index: int, what: str, exc: RayActorError) -> ActorDied:
    died = actor_died(index, what, str(exc))
    died.__cause__ = exc
    return died
