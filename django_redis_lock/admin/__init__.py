"""The admin's Locks page: held locks of every alias, live TTLs, owner-checked force-release.

No table stands behind the page. The unmanaged :class:`~django_redis_lock.models.Lock` model
carries the permissions (``view_lock`` to see the page, ``release_lock`` to force-release), and
the views read the backends of ``LOCKS`` through :data:`~django_redis_lock.locks`, one
``SCAN`` page at a time.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from ..exceptions import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    InvalidLockBackendError,
)
from ..handler import locks
from ..listing import reader_counts
from ..models import Lock
from .page import REFRESH_CHOICES, ListQuery, LockRow, RateRow, WaiterRow, kept_filters

__all__ = ["LockAdmin"]

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
        rows, next_at, next_cursor, unlisted = self.scan(request, chosen, query)
        scanned = chosen[chosen.index(query.at) :] if query.at in chosen else chosen
        can_release = self.has_release_permission(request)
        if can_release:
            back = urlencode(query.filters())
            rows = [
                dataclasses.replace(
                    row, release_url=self.url("release", self.release_params(row, back))
                )
                for row in rows
            ]
        # The first page shows the rate limits with hits in a window, of the aliases whose
        # locks could be listed (the others are reported once): at most a page of them, as a
        # rate limit per IP or per user may have thousands; a search narrows them.
        readable = [alias for alias in chosen if alias not in unlisted]
        rate_rows = [] if query.at else self.rate_rows(request, readable, query)
        rates_capped = len(rate_rows) > self.list_per_page
        rate_rows = rate_rows[: self.list_per_page]
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
            "rate_rows": rate_rows,
            "rates_capped": rates_capped,
            # "No held locks" is said only of aliases that were listed: an alias that could
            # not be listed may hold any number of locks.
            "unlisted": unlisted,
            "listed_any": bool(rows) or len(unlisted) < len(scanned),
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
    ) -> tuple[list[LockRow], str | None, str | None, list[str]]:
        """Return one page of holders, where the next page starts, and the unlisted aliases.

        The page starts at ``query.at`` (an alias) and its cursor, and goes on through the
        following aliases until about :attr:`list_per_page` holders are found, with one
        ``scan_page()`` call per alias: the whole listing is never loaded. The next page is
        an alias and its cursor; an alias that could not be listed is reported as a message
        and returned last.
        """
        start = aliases.index(query.at) if query.at in aliases else 0
        rows: list[LockRow] = []
        unlisted: list[str] = []
        for index in range(start, len(aliases)):
            alias = aliases[index]
            cursor = query.cursor if index == start else None
            try:
                cursor, infos = locks[alias].scan_page(
                    query.pattern, cursor, count=self.list_per_page - len(rows)
                )
            except (BackendUnavailableError, InvalidLockBackendError) as exc:
                # Unreachable, or refused by the checks: the other aliases are still listed.
                messages.error(request, f"Locks on alias {alias!r} could not be listed: {exc}")
                unlisted.append(alias)
                cursor, infos = None, []
            except InvalidLockArgumentError:  # a cursor edited by hand: start that alias over
                cursor, infos = locks[alias].scan_page(
                    query.pattern, None, count=self.list_per_page - len(rows)
                )
            ordered = sorted(infos, key=lambda info: (info.name, info.owner))
            readers = reader_counts(infos)  # a page lists every holder of each of its locks
            rows.extend(LockRow(alias, info, readers=readers.get(info.name)) for info in ordered)
            if cursor is not None:
                return rows, alias, cursor, unlisted
            if len(rows) >= self.list_per_page:
                following = aliases[index + 1 : index + 2]
                return rows, (following[0] if following else None), None, unlisted
        return rows, None, None, unlisted

    def rate_rows(
        self, request: HttpRequest, aliases: list[str], query: ListQuery
    ) -> list[RateRow]:
        """Return a row per rate of each rate limit matching the query, on ``aliases``.

        At most one more than a page: the listing stops there, however many there are.
        """
        rows: list[RateRow] = []
        for alias in aliases:
            room = self.list_per_page + 1 - len(rows)
            if room <= 0:
                break
            try:
                infos = list(itertools.islice(locks[alias].iter_rate_limits(query.pattern), room))
            except (BackendUnavailableError, InvalidLockBackendError) as exc:
                messages.error(
                    request, f"Rate limits on alias {alias!r} could not be listed: {exc}"
                )
                continue
            rows += [RateRow(alias, info) for info in infos]
        return sorted(rows, key=lambda row: (row.alias, row.info.name, row.info.rate.period))

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
            current = locks[alias].lock_info(name)
            holder = next((info for info in current if info.owner == owner), None)
            readers = reader_counts(current).get(name)
            row = None if holder is None else LockRow(alias, holder, readers=readers)
            if request.method == "POST":
                return self.release(request, alias, name, owner, row=row, back_url=back_url)
            waiters = [] if holder is None else locks[alias].waiters(name)
        except (BackendUnavailableError, InvalidLockBackendError) as exc:
            messages.error(request, f"Nothing was released: {exc}")
            return HttpResponseRedirect(back_url)
        if row is None:
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
            "row": row,
            "waiters": [WaiterRow(waiter) for waiter in waiters],
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
