"""A view that serves every metric of ``prometheus_client``'s default registry."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

__all__ = ["metrics"]


def metrics(request: HttpRequest) -> HttpResponse:
    """Return the metrics in Prometheus's text format; route it, behind what protects it."""
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
