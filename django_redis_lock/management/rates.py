"""``manage.py locks rates``: the rate limits with hits in their window, and their use.

Each alias of ``LOCKS`` is read in turn (or ``--using ALIAS`` only), with the backend's
``iter_rate_limits()``: one row per rate of each rate limit, with how much of its window is
used and when the next slot frees (see ``django_redis_lock.listing.rate_use``).
"""

from __future__ import annotations

import json

from django.core.management.base import CommandError, OutputWrapper

from ..backends.base import RateLimitInfo, glob_escape
from ..exceptions import BackendUnavailableError
from ..listing import rate_use
from .inspection import each_backend
from .output import JSON_VERSION, one_line, plural, shown

__all__ = ["RATES_JSON_FORMAT", "list_rate_limits"]

RATES_JSON_FORMAT = f"""\
JSON (--json, version {JSON_VERSION}): {{"version": {JSON_VERSION}, "rate_limits": [RATE, ...], \
"errors": []}}, where each RATE is one rate of one rate limit:
  alias          str         the LOCKS alias
  name           str         the exact rate limit name
  rate           str         the rate, as written to rate_limit() ("10/s", "50000/d")
  limit          int         the hits (of weight 1) it admits per period
  period         float       its period, in seconds
  used           int         the weight of the hits in its window now
  free_in        float       seconds until a hit of weight 1 would be admitted (0: now)
"errors" lists {{"alias": ..., "error": ...}} for aliases that could not be read."""

HEADER = ("ALIAS", "NAME", "RATE", "USED", "NEXT SLOT")


def list_rate_limits(
    stdout: OutputWrapper,
    *,
    using: str | None,
    pattern: str | None,
    exact: str | None,
    as_json: bool,
) -> None:
    """Write every rate of every matching rate limit, as a table or as JSON."""
    glob = glob_escape(exact) if exact else pattern or "*"
    found: list[tuple[str, RateLimitInfo]] = []
    errors: list[tuple[str, str]] = []
    for alias, backend in each_backend(using):
        try:
            infos = backend.iter_rate_limits(glob)
            found += [(alias, info) for info in infos if exact is None or info.name == exact]
        except BackendUnavailableError as exc:
            errors.append((alias, one_line(exc)))
    found.sort(key=lambda row: (row[0], row[1].name, row[1].rate.period))
    if as_json:
        stdout.write(
            json.dumps(
                {
                    "version": JSON_VERSION,
                    "rate_limits": [_record(alias, info) for alias, info in found],
                    "errors": [{"alias": a, "error": e} for a, e in errors],
                }
            )
        )
    else:
        _table(stdout, found, errors)
    if errors:
        raise CommandError("; ".join(f"alias {a!r}: {e}" for a, e in errors), returncode=2)


def _record(alias: str, info: RateLimitInfo) -> dict[str, object]:
    return {
        "alias": alias,
        "name": info.name,
        "rate": str(info.rate),
        "limit": info.rate.limit,
        "period": info.rate.period,
        "used": info.used,
        "free_in": round(info.free_in, 3),
    }


def _table(
    stdout: OutputWrapper, found: list[tuple[str, RateLimitInfo]], errors: list[tuple[str, str]]
) -> None:
    if not found:
        if not errors:
            stdout.write("No rate limit has hits in its window.")
        return
    rows = [
        HEADER,
        *((alias, shown(info.name), str(info.rate), *rate_use(info)) for alias, info in found),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        stdout.write("  ".join([*padded, row[-1]]).rstrip())
    names = len({(alias, info.name) for alias, info in found})
    stdout.write(f"{plural(names, 'rate limit')} listed.")
