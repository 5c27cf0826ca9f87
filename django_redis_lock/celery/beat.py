"""Celery beat on every node, one sender: ``-S django_redis_lock.celery.beat:LeaderScheduler``.

Every node runs beat; the one that holds the :func:`~django_redis_lock.leader` term sends,
the others try to be elected every second or so. When the leader dies, the next one is
elected when its lease ends.

A due time is sent once, because sending is claimed first, in Redis, by one script that
checks two things at once (``CLAIM``): that the sender's term is still live on the server,
with its own term number (a leader paused past its lease is refused, even if nobody has
been elected since), and that nobody recorded a later run of the entry than the one the
sender counts from. The claim records the new run, so a new leader starts from the runs
the old one sent (its own schedule file is stale): it adopts them when elected. A run
missed while nobody led is sent once by the next leader, as Celery sends any late entry.

:func:`leader_scheduler` makes the same of another scheduler class (django-celery-beat's
``DatabaseScheduler``, say).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import logging
from dataclasses import dataclass
from typing import Any, TypeVar

from celery.beat import PersistentScheduler, ScheduleEntry, Scheduler
from django.conf import settings

from .._core.validation import validate_name, validate_ttl
from ..backends.redis import RedisBackend
from ..conf import DEFAULT_ALIAS
from ..exceptions import InvalidLockBackendError, LockArgumentTypeError, LockError
from ..handler import locks
from ..leader import Campaign, Term

__all__ = [
    "HEADER",
    "BeatSettings",
    "LeaderScheduler",
    "beat_settings",
    "fingerprint",
    "leader_scheduler",
]

logger = logging.getLogger("django_redis_lock")

#: Each message beat sends carries this header: ``{"term": N, "after": µs, "run": µs}``, the
#: term that sent it, the run it follows and its own (microseconds since the epoch).
HEADER = "django_redis_lock_beat"

#: The beat record of a campaign is ``<key_prefix>:{=leader:<name>}:<KIND>``: a hash of entry
#: name -> its last run sent (microseconds since the epoch), in the lock's hash slot.
KIND = "beat"

#: Claim a run of an entry for the sender, if its term is live and nobody sent a later run.
CLAIM = """
-- KEYS[1] the leader lock's holders hash (see backends/_redis/lua/_prelude.lua): owner ->
--         "<lease end ms> <holds> <fencing token> ..."
-- KEYS[2] the beat record: entry name -> "<its last run sent (us)> <its fingerprint>"
-- ARGV[1] the sender's owner token  ARGV[2] its term number (fencing token)
-- ARGV[3] the entry's name  ARGV[4] the last run the sender counts from (us)
-- ARGV[5] the run to send (us)  ARGV[6] the entry's fingerprint
-- Returns {1} when the run is recorded (send it; also when this very run was recorded by an
-- earlier call whose reply was lost), {0, last run} when a run later than ARGV[4] is
-- recorded (do not send; count from it), {-1} when the sender's term is over.
local text = redis.call('HGET', KEYS[1], ARGV[1])
if not text then
  return {-1}
end
local ends, fence = string.match(text, '^(%d+) %d+ (%d+) ')
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if not ends or tonumber(ends) <= now or fence ~= ARGV[2] then
  return {-1}
end
local last = string.match(redis.call('HGET', KEYS[2], ARGV[3]) or '', '^(%d+)')
if last == ARGV[5] then
  return {1}
end
if last and tonumber(last) > tonumber(ARGV[4]) then
  return {0, last}
end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[5] .. ' ' .. ARGV[6])
return {1}
"""

#: How many times a leader sends one claim whose reply did not come before it gives the run
#: up (a claim is idempotent: sent again, it finds its own run recorded).
CLAIM_ATTEMPTS = 3

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MICROSECOND = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class BeatSettings:
    """What the leader scheduler reads from Celery's config (or Django's settings)."""

    #: The campaign's name (its lock is ``leader:<name>``): ``beat_leader_lock``; by default
    #: this followed by ``:`` and the app's main name, when it has one.
    name: str = "celery-beat"
    #: The term's lease in seconds, the longest a dead leader holds beat up: ``beat_leader_ttl``.
    ttl: float = 10.0
    #: The ``LOCKS`` alias of the Redis that elects and records: ``beat_leader_using``.
    using: str = DEFAULT_ALIAS


def beat_settings(app: Any) -> BeatSettings:
    """Return the leader settings of Celery ``app``.

    Each is read from the app's config (``beat_leader_lock``, which Celery also finds as
    ``CELERY_BEAT_LEADER_LOCK`` in Django settings loaded with the ``CELERY`` namespace),
    else from Django's settings under its upper-case name, else its default.
    """

    def read(key: str, default: Any) -> Any:
        value = app.conf.get(key)
        if value is None:
            value = getattr(settings, f"CELERY_{key.upper()}", None)
        return default if value is None else value

    defaults = BeatSettings()
    # Two projects on one Redis elect a leader each: the default names the app.
    name = read("beat_leader_lock", f"{defaults.name}:{app.main}" if app.main else defaults.name)
    # Settings, not arguments: their errors are configuration errors.
    try:
        validate_name(name)
    except LockError as exc:
        raise InvalidLockBackendError(f"beat_leader_lock must be a lock name: {exc}") from None
    try:
        ttl = validate_ttl(read("beat_leader_ttl", defaults.ttl), argument="beat_leader_ttl")
    except LockError as exc:
        raise InvalidLockBackendError(str(exc)) from None
    using = read("beat_leader_using", defaults.using)
    if not isinstance(using, str):
        raise InvalidLockBackendError(f"beat_leader_using must be a LOCKS alias, got {using!r}.")
    return BeatSettings(name=name, ttl=ttl, using=using)


def fingerprint(entry: ScheduleEntry) -> str:
    """Return what tells an entry's task and schedule apart, as recorded with its runs."""
    text = f"{entry.task}|{entry.schedule!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def micros(when: dt.datetime) -> int:
    """Return ``when`` as microseconds since the epoch (naive means UTC, as in Celery)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return (when - _EPOCH) // _MICROSECOND


def from_micros(value: int, like: dt.datetime) -> dt.datetime:
    """Return ``value`` microseconds since the epoch as a datetime in the time zone of ``like``."""
    when = _EPOCH + dt.timedelta(microseconds=value)
    if like.tzinfo is None:
        return when.replace(tzinfo=None)
    return when.astimezone(like.tzinfo)


class LeaderMixin:
    """What :func:`leader_scheduler` adds to a scheduler class (Celery's ``Scheduler`` follows)."""

    app: Any
    schedule: Any
    max_interval: float

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.leader_settings = settings_ = beat_settings(app)
        self.campaign = Campaign(
            settings_.name,
            ttl=settings_.ttl,
            using=settings_.using,
            metadata={"role": "celery beat"},
        )
        self._backend()  # a bad alias stops beat as it starts
        self._term: Term | None = None
        self._runs: dict[str, dt.datetime] = {}
        self._adopt_again = False
        self._claim_script: Any = None
        super().__init__(app, *args, **kwargs)  # type: ignore[call-arg]

    # Leading -------------------------------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Send what is due if this node leads; else try to be elected. Return the next wait."""
        if self._leading() is None:
            return self.follow_every
        interval: float = super().tick(*args, **kwargs)  # type: ignore[misc]
        return interval

    @property
    def follow_every(self) -> float:
        """Return how often a node that does not lead tries to be elected, in seconds."""
        return min(1.0, self.leader_settings.ttl / 4)

    def _leading(self) -> Term | None:
        """Return the live term of this node, elected now if need be; None if another leads."""
        term = self._term
        if term is not None and term.lost:
            logger.warning("Beat stops sending: its %r is lost.", term)
            self._drop()
        try:
            if self._term is None:
                self._term = self.campaign.acquire(blocking=False)
                if self._term is not None:
                    logger.info("Beat sends from now on, in %r.", self._term)
                    self._adopt_again = True
            if self._term is not None and self._adopt_again:
                self._adopt()
        except (LockError, self._client_error()) as exc:
            logger.warning("Beat could not run for leader: %s", exc)
            self._drop()
        return self._term

    def _drop(self) -> None:
        if self._term is not None:
            self._term.resign()
            self._term = None

    def _backend(self) -> RedisBackend:
        backend = locks[self.campaign.using]
        if not isinstance(backend, RedisBackend):
            raise InvalidLockBackendError(
                f"beat_leader_using names the alias {self.campaign.using!r}, whose backend "
                f"{type(backend).__name__} keeps no record beat can share: use an alias of "
                "a RedisBackend (or RedisClusterBackend)."
            )
        return backend

    def _client_error(self) -> type[Exception]:
        # The root of the errors of the backend's client library (redis-py's, valkey-py's).
        return self._backend().family.error

    def _record_key(self) -> str:
        return self._backend().key(self.campaign.lock_name, KIND)

    def _adopt(self) -> None:
        """Count each entry from its last run recorded in Redis (a new leader's file is stale).

        A record of another task or schedule under the entry's name (an entry removed, then
        added again changed) is not this entry's: it starts as Celery starts a new entry.
        """
        recorded = self._backend().client.hgetall(self._record_key())
        for name, entry in self.schedule.items():
            value = recorded.get(name.encode(), b"")
            text = value.decode() if isinstance(value, bytes) else value
            last, _, mark = text.partition(" ")
            if last.isdigit() and mark == fingerprint(entry):
                entry.last_run_at = from_micros(int(last), entry.default_now())
        self._adopt_again = False
        self.populate_heap()  # type: ignore[attr-defined]

    # Sending -------------------------------------------------------------------------------

    def reserve(self, entry: ScheduleEntry) -> ScheduleEntry:
        """Advance ``entry`` as Celery does, and remember the run it now counts from."""
        new_entry: ScheduleEntry = super().reserve(entry)  # type: ignore[misc]
        self._runs[entry.name] = new_entry.last_run_at
        return new_entry

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Send ``entry`` if this term still leads and nobody sent this run already."""
        run = self._runs.pop(entry.name, None) or entry.default_now()
        term = self._term
        if term is None or term.lost:
            logger.warning("Beat did not send %s: this node no longer leads.", entry.name)
            return
        after = entry.last_run_at
        for attempt in range(1, CLAIM_ATTEMPTS + 1):
            try:
                reply = self._claim(term, entry, after, run)
                break
            except (LockError, self._client_error()) as exc:
                if attempt == CLAIM_ATTEMPTS or term.lost:
                    logger.warning(
                        "Beat did not send %s: its run could not be recorded: %s", entry.name, exc
                    )
                    self._adopt_again = True
                    return
        if reply[0] == -1:
            logger.warning("Beat did not send %s: %r is over on the server.", entry.name, term)
            self._drop()
            return
        if reply[0] == 0:
            logger.info("Beat did not send %s: another leader sent a later run.", entry.name)
            self._adopt_again = True
            return
        sent = copy.copy(entry)
        headers = dict(entry.options.get("headers") or {})
        headers[HEADER] = {"term": term.number, "after": micros(after), "run": micros(run)}
        sent.options = {**entry.options, "headers": headers}
        super().apply_entry(sent, producer)  # type: ignore[misc]

    def _claim(
        self, term: Term, entry: ScheduleEntry, after: dt.datetime, run: dt.datetime
    ) -> list[Any]:
        backend = self._backend()
        keys = [backend.key(self.campaign.lock_name), self._record_key()]
        args = [
            term.owner,
            str(term.number),
            entry.name,
            str(micros(after)),
            str(micros(run)),
            fingerprint(entry),
        ]
        if self._claim_script is None:
            self._claim_script = backend.client.register_script(CLAIM)  # sent by its SHA1
        reply: list[Any] = self._claim_script(keys=keys, args=args, client=backend.client)
        return [int(reply[0]), *reply[1:]]

    # Closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close as the wrapped scheduler does, then resign, so another node leads at once."""
        try:
            super().close()  # type: ignore[misc]
        finally:
            self._drop()

    @property
    def info(self) -> str:
        """Return beat's banner lines, with the campaign's."""
        own: str = super().info  # type: ignore[misc]
        line = f"    . leader -> {self.campaign.lock_name} (ttl {self.leader_settings.ttl:g}s)"
        return f"{own}\n{line}" if own else line


S = TypeVar("S", bound=type)


def leader_scheduler(scheduler_class: S) -> S:
    """Return a subclass of ``scheduler_class`` that sends only while this node leads.

    ``scheduler_class`` is a subclass of Celery's ``celery.beat.Scheduler`` that sends through
    ``Scheduler.tick`` (``reserve`` then ``apply_entry``), as Celery's own and
    django-celery-beat's do. Name the class you build in a module of yours, and give its path
    to ``celery beat -S``.
    """
    if not (isinstance(scheduler_class, type) and issubclass(scheduler_class, Scheduler)):
        raise LockArgumentTypeError(
            "leader_scheduler() needs a subclass of celery.beat.Scheduler, got "
            f"{scheduler_class!r}."
        )
    name = f"Leader{scheduler_class.__name__}"
    namespace = {
        "__module__": scheduler_class.__module__,
        "__qualname__": name,
        "__doc__": f"{scheduler_class.__name__}, sending only from the node elected leader.",
    }
    return type(name, (LeaderMixin, scheduler_class), namespace)  # type: ignore[return-value]


#: Celery's ``PersistentScheduler``, sending only from the node elected leader.
LeaderScheduler = leader_scheduler(PersistentScheduler)
LeaderScheduler.__module__ = __name__
LeaderScheduler.__name__ = LeaderScheduler.__qualname__ = "LeaderScheduler"
