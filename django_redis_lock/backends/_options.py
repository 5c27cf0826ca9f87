"""What OPTIONS a backend takes, and the one place their rules are applied.

:class:`OptionRules` is the configuration half of every backend's contract. A backend lists
its OPTIONS and writes the rules only it knows in :meth:`~OptionRules.option_problems`;
``manage.py check`` runs that method for each alias of ``LOCKS``, and building a backend runs
it on the constructor's keyword arguments, so a rule is written once and enforced by both.
This module imports no client library: the ``LOCKS`` checks read it without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .._core.validation import validate_switch_duration, validate_ttl
from ..exceptions import InvalidLockArgumentError, InvalidLockBackendError

__all__ = ["OptionRules", "Problem"]

_Backend = TypeVar("_Backend", bound="OptionRules")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a setting: the id of its system check, a message, and a hint.

    ``str()`` gives both sentences, as :class:`~django_redis_lock.InvalidLockBackendError`
    says them.
    """

    id: str
    msg: str
    hint: str

    def __str__(self) -> str:
        return f"{self.msg} {self.hint}"


class OptionRules:
    """The OPTIONS a backend accepts, checked by ``manage.py check`` and the constructor alike.

    Building a backend checks its keyword arguments first (in ``__new__``, so a subclass's
    ``__init__`` need not call anything) and raises
    :class:`~django_redis_lock.InvalidLockBackendError` for the first problem found.
    """

    #: OPTIONS accepted by every backend; subclasses add theirs.
    options: ClassVar[frozenset[str]] = frozenset({"key_prefix", "ttl", "max_hold"})
    #: Further OPTIONS passed through to the client library (redis-py's connection pool).
    connection_options: ClassVar[frozenset[str]] = frozenset()
    #: How the E007 hint names :attr:`connection_options` (empty: it does not).
    connection_options_described: ClassVar[str] = ""
    #: Keywords of the client library that OPTIONS may not pass, each with the reason (E007).
    refused_options: ClassVar[Mapping[str, str]] = {}
    #: OPTIONS that are durations in seconds, each checked as a ``ttl`` argument is.
    duration_options: ClassVar[frozenset[str]] = frozenset({"ttl", "max_hold"})
    #: Duration OPTIONS that may also be 0, which turns off what they time.
    switch_duration_options: ClassVar[frozenset[str]] = frozenset()
    #: Duration OPTIONS that may also be None, which is what leaving them out means.
    optional_duration_options: ClassVar[frozenset[str]] = frozenset({"max_hold"})

    def __new__(cls: type[_Backend], *args: Any, **options: Any) -> _Backend:
        found = cls.check_options(options, where=f"{cls.__name__} OPTIONS")
        if found:
            raise InvalidLockBackendError(str(found[0]))
        return super().__new__(cls)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        """Return every problem of ``options``, in the order of their check ids.

        ``where`` names the OPTIONS in each message: ``"LOCKS['default']['OPTIONS']"`` in
        ``manage.py check``, ``"RedisBackend OPTIONS"`` for a backend built directly.
        """
        return sorted(cls.option_problems(options, where=where), key=lambda problem: problem.id)

    @classmethod
    def option_problems(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        """Return what is wrong with ``options``, named ``where`` as in :meth:`check_options`.

        Every backend gets these rules: no unknown key (E007), every duration option a number
        of seconds from 1 ms (or 0, for a switch; or None, for an optional one) to ten years
        (E009), a ``key_prefix`` that is a non-empty string without braces (E010). A subclass
        adds its own, extending the list of ``super().option_problems(options, where=where)``;
        :meth:`own_problem` phrases one that only it knows (E014).
        """
        found = [
            Problem(
                "django_redis_lock.E007",
                f"{where}[{key!r}] cannot be set for {cls.__name__}: {reason}.",
                f"Remove {key!r} from OPTIONS.",
            )
            for key, reason in cls.refused_options.items()
            if key in options
        ]
        known = cls.options | cls.connection_options | set(cls.refused_options)
        unknown = sorted(set(options) - known)
        if unknown:
            name = cls.__name__
            accepted = ", ".join(sorted(cls.options))
            described = cls.connection_options_described
            also = f", and {described}" if described else ""
            found.append(
                Problem(
                    "django_redis_lock.E007",
                    f"{where} has unknown keys for {name}: {', '.join(map(repr, unknown))}.",
                    f"{name} accepts: {accepted}{also}.",
                )
            )
        for option in options:
            if option not in cls.duration_options:
                continue
            if options[option] is None and option in cls.optional_duration_options:
                continue
            argument = f"{where}[{option!r}]"
            try:
                if option in cls.switch_duration_options:
                    validate_switch_duration(options[option], argument=argument)
                else:
                    validate_ttl(options[option], argument=argument)
            except InvalidLockArgumentError as exc:
                found.append(
                    Problem(
                        "django_redis_lock.E009",
                        str(exc),
                        "Durations are seconds; floats give millisecond precision (0.5 is "
                        "500 ms).",
                    )
                )
        prefix = options.get("key_prefix", "lock")
        # Refused on every backend, so one LOCKS value serves tests (LocMem) and Redis alike.
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            found.append(
                Problem(
                    "django_redis_lock.E010",
                    f"{where}['key_prefix'] must be a non-empty string without braces, "
                    f"got {prefix!r}.",
                    "Every key of a lock starts with the prefix; braces would break the Redis "
                    "Cluster hash tag. The default is 'lock'.",
                )
            )
        return found

    @classmethod
    def own_problem(cls, where: str, problem: str) -> Problem:
        """Return ``problem``, one sentence about an option only this backend knows (E014)."""
        return Problem(
            "django_redis_lock.E014",
            f"{where}: {problem}",
            f"See the OPTIONS of {cls.__name__} in the deployment documentation.",
        )
