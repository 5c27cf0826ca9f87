"""What the admin's Locks page reads from its URL and shows of each holder.

:class:`ListQuery` holds the list's filters and where its page starts; :class:`LockRow` is one
holder as the templates show it, and :class:`WaiterRow` one owner waiting for a lock, both
described by :mod:`django_redis_lock.listing` (a read-write lock's holders and waiters with
their mode, its readers with how many hold it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.http.request import QueryDict
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..backends.base import LockInfo, RateLimitInfo, WaiterInfo, glob_escape
from ..listing import (
    describe_holder,
    describe_waiter,
    duration,
    metadata_json,
    metadata_summary,
    rate_use,
    shorten,
)

__all__ = [
    "FILTER_PARAMS",
    "METADATA_WIDTH",
    "REFRESH_CHOICES",
    "ListQuery",
    "LockRow",
    "RateRow",
    "WaiterRow",
    "kept_filters",
]

#: Query parameters of the list that a release carries back to it afterwards.
FILTER_PARAMS = ("alias", "q", "exact", "refresh")
#: The metadata column shows this many characters; the full text is in its tooltip.
METADATA_WIDTH = 120
#: The auto-refresh intervals offered, in seconds (0: off); ``?refresh=N`` takes any 1-3600.
REFRESH_CHOICES = (("off", 0), ("5 s", 5), ("30 s", 30), ("60 s", 60))
_GLOB_CHARS = re.compile(r"[*?\[]")
#: The separators of a lock name after which the list may break it onto the next line.
_NAME_BREAKS = re.compile(r"([:./=,@])")


@dataclass(frozen=True)
class RateRow:
    """One rate of one rate limit on one alias: how much of its window is used."""

    alias: str
    info: RateLimitInfo

    @property
    def name_html(self) -> SafeString:
        """Return the name, escaped, with a line-break opportunity after each separator."""
        return mark_safe(_NAME_BREAKS.sub(r"\1<wbr>", escape(self.info.name)))  # noqa: S308

    @property
    def used(self) -> str:
        """Return the weight used in the window out of the limit: "7/10"."""
        return rate_use(self.info)[0]

    @property
    def next_slot(self) -> str:
        """Return when a slot frees: "now", or "in 0.4s"."""
        return rate_use(self.info)[1]


@dataclass(frozen=True)
class LockRow:
    """One holder of one lock on one alias, with what the templates show of it.

    ``readers`` is how many readers hold the lock, for a reader of a read-write lock (see
    :func:`~django_redis_lock.listing.reader_counts`).
    """

    alias: str
    info: LockInfo
    release_url: str = ""
    readers: int | None = None

    @property
    def holder(self) -> str:
        """Return the holder's description ("… (read, 3 readers)" for a reader)."""
        return describe_holder(self.info, readers=self.readers)

    @property
    def name_html(self) -> SafeString:
        """Return the name, escaped, with a line-break opportunity after each separator.

        Names have no spaces to wrap at: in a narrow column the browser then breaks
        ``celery:shop.tasks.bill_customer:42`` after a ``.`` or ``:`` rather than inside a word.
        """
        return mark_safe(_NAME_BREAKS.sub(r"\1<wbr>", escape(self.info.name)))  # noqa: S308

    @property
    def ttl_text(self) -> str:
        """Return the lease left, as the page's countdown starts it."""
        return duration(self.info.ttl)

    @property
    def held_for_text(self) -> str:
        """Return how long the holder has held the lock."""
        return duration(self.info.held_for)

    @property
    def metadata_json(self) -> str:
        """Return the holder's metadata as one line of JSON ("" when it has none)."""
        return metadata_json(self.info) if self.info.metadata else ""

    @property
    def metadata_short(self) -> str:
        """Return the metadata on one line, cut to the column's width."""
        return shorten(metadata_summary(self.info), METADATA_WIDTH)

    @property
    def metadata_pretty(self) -> str:
        """Return the metadata indented, for the confirmation page."""
        return metadata_json(self.info, indent=2)

    @property
    def waiting_text(self) -> str:
        """Return how many owners wait for the lock: "3 waiting", or "none"."""
        return f"{self.info.waiting} waiting" if self.info.waiting else "none"


@dataclass(frozen=True)
class WaiterRow:
    """One owner waiting for a lock, as the confirmation page lists it."""

    info: WaiterInfo

    @property
    def waiter(self) -> str:
        """Return who waits, its place in the queue, and for how long."""
        return describe_waiter(self.info)

    @property
    def metadata_json(self) -> str:
        """Return the waiter's metadata as one line of JSON ("" when it has none)."""
        return metadata_json(self.info) if self.info.metadata else ""


@dataclass
class ListQuery:
    """What the list shows: its filters (kept across pages) and where its page starts."""

    alias: str = ""
    q: str = ""
    exact: bool = False
    refresh: int | None = None
    at: str = ""
    cursor: str | None = None
    page: int = 1
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_params(cls, params: Mapping[str, str], aliases: list[str]) -> ListQuery:
        """Read the list's query parameters, dropping (and noting) those it cannot use."""
        query = cls(q=params.get("q", ""), exact=params.get("exact") == "1")
        alias = params.get("alias", "")
        if alias and alias not in aliases:
            query.errors.append(f"There is no alias {alias!r} in settings.LOCKS.")
        elif alias:
            query.alias = alias
        refresh = params.get("refresh", "")
        if refresh.isdigit() and 1 <= int(refresh) <= 3600:
            query.refresh = int(refresh)
        at = params.get("at", "")
        if at in aliases and (not query.alias or at == query.alias):
            query.at, query.cursor = at, params.get("cursor") or None
            page = params.get("page", "")
            query.page = int(page) if page.isdigit() and int(page) > 0 else 1
        return query

    @property
    def pattern(self) -> str:
        """Return the glob for the backends: text without glob characters is a substring."""
        if self.exact and self.q:
            return glob_escape(self.q)
        if not self.q:
            return "*"
        return self.q if _GLOB_CHARS.search(self.q) else f"*{glob_escape(self.q)}*"

    def filters(self, **changes: Any) -> dict[str, str]:
        """Return the filter parameters of this query (as changed), without empty ones."""
        values = {"alias": self.alias, "q": self.q, "exact": "1" if self.exact else ""}
        values["refresh"] = str(self.refresh) if self.refresh else ""
        values.update(changes)
        return {key: value for key, value in values.items() if value}


def kept_filters(encoded: str) -> dict[str, str]:
    """Return the list filters carried in ``encoded`` (a query string), and only those."""
    params = QueryDict(encoded)
    return {key: params[key] for key in FILTER_PARAMS if params.get(key)}
