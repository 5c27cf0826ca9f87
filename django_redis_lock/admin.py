"""The admin's Locks page: held locks of every alias, live TTLs, owner-checked force-release.

No table stands behind the page. The unmanaged :class:`~django_redis_lock.models.Lock` model
carries the permissions (``view_lock`` to see the page, ``release_lock`` to force-release), and
the views read the backends of ``LOCKS`` through :data:`~django_redis_lock.locks`, one
``SCAN`` page at a time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.http.request import QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from .backends.base import LockInfo, glob_escape
from .exceptions import BackendUnavailableError, InvalidLockArgumentError
from .handler import locks
from .models import Lock

__all__ = ["LockAdmin", "describe_holder", "format_duration"]

#: Query parameters of the list that a release carries back to it afterwards.
FILTER_PARAMS = ("alias", "q", "exact", "refresh")
#: Metadata of Celery holders that the owner column already shows.
CELERY_KEYS = frozenset({"task_id", "task_name", "hostname", "worker_pid"})
#: The metadata column shows this many characters; the full text is in its tooltip.
METADATA_WIDTH = 120
#: The auto-refresh intervals offered, in seconds (0: off); ``?refresh=N`` takes any 1-3600.
REFRESH_CHOICES = (("off", 0), ("5 s", 5), ("30 s", 30), ("60 s", 60))
_GLOB_CHARS = re.compile(r"[*?\[]")
#: The separators of a lock name after which the list may break it onto the next line.
_NAME_BREAKS = re.compile(r"([:./=,@])")


def format_duration(seconds: float) -> str:
    """Return whole ``seconds`` as the page shows them: ``42 s``, ``3 min 05 s``, ``2 h 07 min``.

    ``static/django_redis_lock/locks.js`` formats the live countdown the same way.
    """
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def describe_holder(info: LockInfo) -> str:
    """Return who holds ``info``: the Celery task when one does, else host, pid and thread."""
    meta = info.metadata
    if meta.get("task_id") or meta.get("task_name"):
        text = f"Celery task {meta.get('task_name') or '(unnamed)'}"
        if meta.get("task_id"):
            text += f" [{meta['task_id']}]"
        where = [str(meta["hostname"])] if meta.get("hostname") else []
        if meta.get("worker_pid") is not None:
            where.append(f"pid {meta['worker_pid']}")
        return f"{text} on {', '.join(where)}" if where else text
    where = [info.host] if info.host else []
    if info.pid is not None:
        where.append(f"pid {info.pid}")
    if info.thread:
        where.append(f"thread {info.thread}")
    return ", ".join(where) or "unknown"


@dataclass(frozen=True)
class LockRow:
    """One holder of one lock on one alias, with what the templates show of it."""

    alias: str
    info: LockInfo
    release_url: str = ""

    @property
    def holder(self) -> str:
        """Return the holder's description."""
        return describe_holder(self.info)

    @property
    def name_html(self) -> SafeString:
        """Return the name, escaped, with a line-break opportunity after each separator.

        Names have no spaces to wrap at: in a narrow column the browser then breaks
        ``celery:shop.tasks.bill_customer:42`` after a ``.`` or ``:`` rather than inside a word.
        """
        return mark_safe(_NAME_BREAKS.sub(r"\1<wbr>", escape(self.info.name)))  # noqa: S308

    @property
    def ttl_text(self) -> str:
        """Return the lease left, rounded up as a countdown is."""
        return format_duration(math.ceil(self.info.ttl))

    @property
    def held_for_text(self) -> str:
        """Return how long the holder has held the lock."""
        return format_duration(self.info.held_for)

    @property
    def metadata_json(self) -> str:
        """Return the holder's metadata as one line of JSON ("" when it has none)."""
        if not self.info.metadata:
            return ""
        return json.dumps(self.info.metadata, ensure_ascii=False, sort_keys=True, default=str)

    @property
    def metadata_short(self) -> str:
        """Return the metadata as ``key=value`` pairs cut to the column's width.

        A Celery holder's task, worker and pid are left out: the owner column shows them.
        """
        shown = {
            key: value
            for key, value in self.info.metadata.items()
            if not (key in CELERY_KEYS and self.holder.startswith("Celery task"))
        }
        text = ", ".join(
            f"{key}={value if isinstance(value, str) else json.dumps(value, default=str)}"
            for key, value in sorted(shown.items())
        )
        return text if len(text) <= METADATA_WIDTH else text[: METADATA_WIDTH - 1] + "…"

    @property
    def metadata_pretty(self) -> str:
        """Return the metadata indented, for the confirmation page."""
        meta = self.info.metadata
        return json.dumps(meta, ensure_ascii=False, sort_keys=True, indent=2, default=str)


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


if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Lock]
else:  # Django's ModelAdmin is generic only in its type stubs.
    ModelAdmin = admin.ModelAdmin


@admin.register(Lock)
class LockAdmin(ModelAdmin):
    """List held locks of every alias of ``LOCKS``; force-release one after confirmation."""

    #: About this many holders per page; each page is one ``scan_page()`` per alias it spans.
    list_per_page = 50
    change_list_template = "django_redis_lock/lock_list.html"
    release_template = "django_redis_lock/release_confirmation.html"

    # Permissions -------------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Lock | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Lock | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Lock | None = None) -> bool:
        codename = get_permission_codename("view", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_release_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may force-release locks (``release_lock``)."""
        return request.user.has_perm(f"{self.opts.app_label}.release_lock")

    # URLs ----------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # Only the list and the release page: the change and delete views would read a table
        # that does not exist. Names, owners and aliases travel in the query string, so any
        # character in a lock's name survives the trip.
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "release/",
                self.admin_site.admin_view(self.release_view),
                name="{}_{}_release".format(*info),
            ),
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="{}_{}_changelist".format(*info),
            ),
        ]

    def url(self, view: str, params: Mapping[str, str] | None = None) -> str:
        """Return the URL of this admin's ``view`` ("changelist" or "release") on its site."""
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"
        url = reverse(name, current_app=self.admin_site.name)
        return f"{url}?{urlencode(params)}" if params else url

    def list_url(self, query: ListQuery, **changes: object) -> str:
        """Return the URL of the list's first page with ``query``'s filters, as changed."""
        return self.url(
            "changelist", query.filters(**{k: str(v or "") for k, v in changes.items()})
        )

    # The list ------------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        request.current_app = self.admin_site.name
        aliases = list(locks)
        query = ListQuery.from_params(request.GET, aliases)
        for error in query.errors:
            messages.error(request, error)
        chosen = [query.alias] if query.alias else aliases
        rows, next_at, next_cursor = self.scan(request, chosen, query)
        can_release = self.has_release_permission(request)
        if can_release:
            back = urlencode(query.filters())
            rows = [
                LockRow(row.alias, row.info, self.url("release", self.release_params(row, back)))
                for row in rows
            ]
        next_url = ""
        if next_at is not None:
            more = {"at": next_at, "cursor": next_cursor or "", "page": str(query.page + 1)}
            next_url = self.url("changelist", query.filters(**more))
        context = {
            **self.admin_site.each_context(request),
            "title": "Held locks",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "can_release": can_release,
            "rows": rows,
            "query": query,
            "alias_links": [
                (alias or "all", alias == query.alias, self.list_url(query, alias=alias))
                for alias in ["", *aliases]
            ],
            "refresh_links": [
                (label, seconds == (query.refresh or 0), self.list_url(query, refresh=seconds))
                for label, seconds in REFRESH_CHOICES
            ],
            "this_url": request.get_full_path(),
            "first_url": self.list_url(query) if query.at else "",
            "next_url": next_url,
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.change_list_template, context)

    def scan(
        self, request: HttpRequest, aliases: list[str], query: ListQuery
    ) -> tuple[list[LockRow], str | None, str | None]:
        """Return one page of holders and where the next page starts (alias, cursor).

        The page starts at ``query.at`` (an alias) and its cursor, and goes on through the
        following aliases until about :attr:`list_per_page` holders are found, with one
        ``scan_page()`` call per alias: the whole listing is never loaded.
        """
        start = aliases.index(query.at) if query.at in aliases else 0
        rows: list[LockRow] = []
        for index in range(start, len(aliases)):
            alias = aliases[index]
            cursor = query.cursor if index == start else None
            try:
                cursor, infos = locks[alias].scan_page(
                    query.pattern, cursor, count=self.list_per_page - len(rows)
                )
            except BackendUnavailableError as exc:
                messages.error(request, f"Locks on alias {alias!r} could not be listed: {exc}")
                cursor, infos = None, []
            except InvalidLockArgumentError:  # a cursor edited by hand: start that alias over
                cursor, infos = locks[alias].scan_page(
                    query.pattern, None, count=self.list_per_page - len(rows)
                )
            ordered = sorted(infos, key=lambda info: (info.name, info.owner))
            rows.extend(LockRow(alias, info) for info in ordered)
            if cursor is not None:
                return rows, alias, cursor
            if len(rows) >= self.list_per_page:
                following = aliases[index + 1 : index + 2]
                return rows, (following[0] if following else None), None
        return rows, None, None

    @staticmethod
    def release_params(row: LockRow, back: str) -> dict[str, str]:
        """Return the query of the release page of ``row``; ``back`` is the list's filters."""
        params = {"alias": row.alias, "name": row.info.name, "owner": row.info.owner}
        return {**params, "_changelist_filters": back} if back else params

    # Force-release -------------------------------------------------------------------------

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """Show what a force-release would free (GET); free it, owner-checked (POST)."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        if not (self.has_view_permission(request) and self.has_release_permission(request)):
            raise PermissionDenied
        request.current_app = self.admin_site.name
        # The lock is named in the query string for the POST too (the form posts back to the
        # page's own URL): browsers rewrite line breaks in form fields, never in a URL.
        params = request.GET
        alias, name, owner = (params.get(key, "") for key in ("alias", "name", "owner"))
        back_url = self.url("changelist", kept_filters(params.get("_changelist_filters", "")))
        if alias not in list(locks) or not name or not owner:
            messages.error(request, "That link does not name a lock: alias, name and owner.")
            return HttpResponseRedirect(back_url)
        try:
            holder = next((i for i in locks[alias].lock_info(name) if i.owner == owner), None)
            if request.method == "POST":
                row = LockRow(alias, holder) if holder else None
                return self.release(request, alias, name, owner, row=row, back_url=back_url)
        except BackendUnavailableError as exc:
            messages.error(request, f"Nothing was released: {exc}")
            return HttpResponseRedirect(back_url)
        if holder is None:
            messages.warning(
                request,
                f"Lock {name!r} on alias {alias!r} is no longer held by owner {owner!r}; "
                "there is nothing to release.",
            )
            return HttpResponseRedirect(back_url)
        context = {
            **self.admin_site.each_context(request),
            "title": "Release this lock?",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "row": LockRow(alias, holder),
            "back_url": back_url,
        }
        return TemplateResponse(request, self.release_template, context)

    def release(
        self,
        request: HttpRequest,
        alias: str,
        name: str,
        owner: str,
        *,
        row: LockRow | None,
        back_url: str,
    ) -> HttpResponse:
        """Force-release ``owner``'s hold on ``name``, if it still holds it; log who did it.

        ``row`` is the holder as read just before, to describe it in the log and the message.
        """
        # Owner-checked: if the lock changed hands since the page was shown, nothing happens.
        removed = locks[alias].force_release(name, owner=owner)
        if not removed:
            messages.error(
                request,
                f"Nothing was released: lock {name!r} on alias {alias!r} is no longer held by "
                f"owner {owner!r} (it was released, expired or taken by another owner since "
                "the confirmation page was shown).",
            )
            return HttpResponseRedirect(back_url)
        holder = f"owner {owner!r}" + (f" ({row.holder})" if row else "")
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=[Lock(name=name)],
            action_flag=DELETION,
            change_message=f"Force-released lock {name!r} on alias {alias!r}, held by {holder}.",
            single_object=True,
        )
        messages.success(request, f"Released lock {name!r} on alias {alias!r}, held by {holder}.")
        return HttpResponseRedirect(back_url)
