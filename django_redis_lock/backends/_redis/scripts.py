"""The Lua scripts in ``lua/``, loaded: each one is the shared prelude, then the script, with
the slow-path helpers inserted where the script says ``--! helpers`` (after its fast path has
returned, so a free lock does not pay for defining them)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["KEY_COUNTS", "SCRIPT_NAMES", "WAKE", "Scripts", "source"]

SCRIPT_NAMES = (
    "acquire",
    "acquire_all",
    "release",
    "extend",
    "ttl",
    "force_release",
    "withdraw",
    "rate",
    "rate_read",
    "retry",
)

#: How many of a lock's keys each script is given (``lua/_prelude.lua`` lists them in order):
#: every key it touches. acquire_all is given this many for each of its locks. (rate.lua,
#: rate_read.lua and retry.lua, which keep rate limits, not locks, are given theirs by
#: ``RedisRateLimits``.)
KEY_COUNTS = {
    "acquire": 6,
    "acquire_all": 6,
    "release": 5,
    "extend": 1,
    "ttl": 1,
    "force_release": 5,
    "withdraw": 7,
}

#: The first element of a reply that carries the owners a script handed the lock to
#: (``reply()`` in ``lua/_helpers.lua``): ``[WAKE, reply, owner, call, owner, call, ...]``.
WAKE = b"wake"

HELPERS_MARKER = "--! helpers"


@cache
def source(name: str) -> str:
    """Return the full source of script ``name``: prelude, script, helpers where marked."""
    lua = files(__package__).joinpath("lua")
    prelude = lua.joinpath("_prelude.lua").read_text("utf-8")
    helpers = lua.joinpath("_helpers.lua").read_text("utf-8")
    script = lua.joinpath(f"{name}.lua").read_text("utf-8")
    return f"{prelude}\n{script.replace(HELPERS_MARKER, helpers)}"


class Scripts:
    """The scripts as one backend sends them: by SHA1 (``EVALSHA``), loaded when needed.

    ``no_script`` is the exception its client library raises for a script the server does
    not have (redis-py's or valkey-py's ``NoScriptError``).
    """

    def __init__(self, no_script: type[Exception]) -> None:
        self.no_script = no_script
        #: The SHA1 of each script, by name: EVALSHA sends the digest, not the source.
        self.sha = {
            name: hashlib.sha1(source(name).encode()).hexdigest()  # noqa: S324
            for name in SCRIPT_NAMES
        }
        self._loaded: set[str] = set()

    def load(self, client: Any, name: str) -> None:
        """Load script ``name`` on ``client``'s server unless done already.

        Pipelines need their scripts loaded first: NOSCRIPT would fail the whole pipeline.
        """
        if name not in self._loaded:
            client.script_load(source(name))
            self._loaded.add(name)

    def lost(self, name: str) -> None:
        """Note that the server lost script ``name`` (it restarted): load it again when needed."""
        self._loaded.discard(name)

    def run(
        self, command: Callable[..., Any], name: str, key: str | Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run script ``name`` on ``key`` (or keys) through ``command`` (an execute_command).

        EVALSHA first; a server that lost its scripts (a restart) is sent the source.
        """
        keys = [key] if isinstance(key, str) else key
        try:
            return command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        except self.no_script:
            return command("EVAL", source(name), len(keys), *keys, *args)

    async def arun(
        self, command: Callable[..., Any], name: str, key: str | Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Do what :meth:`run` does, through an asyncio client's ``command``."""
        keys = [key] if isinstance(key, str) else key
        try:
            return await command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        except self.no_script:
            return await command("EVAL", source(name), len(keys), *keys, *args)

    def run_many(
        self, client: Any, name: str, calls: Sequence[tuple[str | Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Run script ``name`` once per ``(key or keys, args)``, in one pipeline on ``client``.

        Return the replies in order, an error in the place of a call that failed.
        """
        replies: list[Any] = self._pipeline(client, name, calls).execute(raise_on_error=False)
        if any(isinstance(reply, self.no_script) for reply in replies):
            client.script_load(source(name))  # the server lost its scripts (a restart)
            replies = self._pipeline(client, name, calls).execute(raise_on_error=False)
        return replies

    async def arun_many(
        self, client: Any, name: str, calls: Sequence[tuple[str | Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Do what :meth:`run_many` does, through an asyncio ``client``."""
        replies: list[Any] = await self._pipeline(client, name, calls).execute(
            raise_on_error=False
        )
        if any(isinstance(reply, self.no_script) for reply in replies):
            await client.script_load(source(name))  # the server lost its scripts (a restart)
            replies = await self._pipeline(client, name, calls).execute(raise_on_error=False)
        return replies

    def _pipeline(
        self, client: Any, name: str, calls: Sequence[tuple[str | Sequence[str], Sequence[Any]]]
    ) -> Any:
        # A pipeline of ``client`` with script ``name`` queued once per call. (A server that
        # lost the script answers NOSCRIPT to every call of it: none ran.)
        pipe = client.pipeline(transaction=False)
        for key, args in calls:
            keys = [key] if isinstance(key, str) else key
            pipe.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        return pipe
