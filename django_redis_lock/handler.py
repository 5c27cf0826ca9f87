"""``locks``: the alias → backend handler, shaped like Django's ``storages``, reset when
``LOCKS`` changes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from ._core.renewal import renewer
from .backends.base import BaseLockBackend
from .conf import DEFAULT_LOCKS, alias_problems, get_locks_setting, problems
from .exceptions import InvalidLockBackendError

__all__ = ["LocksHandler", "locks", "reset_locks"]


class LocksHandler:
    """Build each backend of ``LOCKS`` on first use and keep it for the process's life."""

    def __init__(self, backends: dict[str, Any] | None = None) -> None:
        self._settings = backends
        self._backends: dict[str, BaseLockBackend] = {}
        # Two threads asking for a new alias at once must get one backend, not two (two
        # in-process backends would each keep their own locks).
        self._building = threading.Lock()

    @property
    def settings(self) -> dict[str, Any]:
        """Return the ``LOCKS``-shaped dict this handler serves."""
        setting = self._settings if self._settings is not None else get_locks_setting()
        if not isinstance(setting, dict):
            raise InvalidLockBackendError(problems(setting)[0].msg)
        return setting

    def __getitem__(self, alias: str) -> BaseLockBackend:
        try:
            return self._backends[alias]
        except KeyError:
            pass
        with self._building:
            if alias not in self._backends:
                self._backends[alias] = self._build(alias)
            return self._backends[alias]

    def _build(self, alias: str) -> BaseLockBackend:
        try:
            config = self.settings[alias]
        except KeyError:
            raise InvalidLockBackendError(
                f"Could not find config for {alias!r} in settings.LOCKS "
                f"(aliases: {', '.join(map(repr, self.settings)) or 'none'})."
            ) from None
        backend = self.create_backend(alias, config)
        if self._settings is None and get_locks_setting() is DEFAULT_LOCKS:
            backend.origin = "the default, because settings.LOCKS is not set"
        return backend

    def __iter__(self) -> Iterator[str]:
        return iter(self.settings)

    def create_backend(self, alias: str, config: dict[str, Any]) -> BaseLockBackend:
        """Build the backend ``config`` describes, checked as ``manage.py check`` would."""
        found = alias_problems(alias, config)
        if found:
            raise InvalidLockBackendError(str(found[0]))
        backend_class: type[BaseLockBackend] = import_string(config["BACKEND"])
        return backend_class(**config.get("OPTIONS", {}))

    def all(self) -> list[BaseLockBackend]:
        """Return the backends of every alias, building the ones not built yet."""
        return [self[alias] for alias in self]

    def close_all(self) -> None:
        """Close the connections of every backend built so far."""
        for backend in self._backends.values():
            backend.close()

    def reset(self) -> None:
        """Forget every built backend (after closing it) so the next use reads settings again.

        Withdrawals still waiting for a forgotten backend's server are dropped with it: what
        they would undo ends with its lease.
        """
        for backend in self._backends.values():
            renewer.drop_undos(backend)
        self.close_all()
        self._backends.clear()


locks = LocksHandler()


@receiver(setting_changed)
def reset_locks(*, setting: str, **kwargs: Any) -> None:
    """Rebuild backends from the new value when ``LOCKS`` changes (``override_settings``)."""
    if setting == "LOCKS":
        get_locks_setting.cache_clear()
        locks.reset()
