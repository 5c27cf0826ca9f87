"""Views of the shop that must not run twice at once: paying an order, importing a catalog.

``pay`` is a function-based view locked per order with ``@lock_view("url:order_id")``: a
customer who clicks "Pay" twice, or whose browser resends the form, gets one payment and,
for the second click, a ``409 Conflict`` with ``Retry-After``. ``CatalogImportView`` is a
class-based view locked per supplier with ``LockMixin``: two staff members who start the same
import at once get one import, and the second is told who is running it.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.middleware.csrf import get_token
from django.views import View

from django_redis_lock.backends.base import LockInfo
from django_redis_lock.decorators import lock_view
from django_redis_lock.mixins import LockMixin

#: How long the pretend payment provider and catalog import take, in seconds.
PAYMENT_SECONDS = 3.0
IMPORT_SECONDS = 5.0


def charge(order_id: int) -> str:
    """Charge the customer for ``order_id`` (pretend: a slow call to a payment provider)."""
    time.sleep(PAYMENT_SECONDS)
    return f"payment-{order_id}-{time.time_ns()}"


def import_catalog(supplier: str) -> int:
    """Import ``supplier``'s catalog (pretend: a slow download); return the rows read."""
    time.sleep(IMPORT_SECONDS)
    return 1000


PAY_FORM = """<!doctype html>
<title>Pay order {order_id}</title>
<form method="post">
  <input type="hidden" name="csrfmiddlewaretoken" value="{token}">
  <p>Order {order_id}. Click twice, quickly: only one payment is made.</p>
  <button>Pay</button>
</form>
"""


# GET shows the form and is not locked; POST (the default methods: POST, PUT, PATCH, DELETE)
# takes the lock view:shop.views.pay:order_id=<order_id> while the payment runs.
@lock_view("url:order_id", ttl=10)
def pay(request: HttpRequest, order_id: int) -> HttpResponse:
    """Show the payment form (GET), or pay the order (POST), once at a time per order."""
    if request.method != "POST":
        return HttpResponse(PAY_FORM.format(order_id=order_id, token=get_token(request)))
    payment = charge(order_id)
    return HttpResponse(f"Order {order_id} paid: {payment}.\n", content_type="text/plain")


class CatalogImportView(LockMixin, View):
    """Import a supplier's catalog (POST), one import at a time per supplier."""

    lock_key = "url:supplier"
    lock_ttl = 30  # renewed while the import runs; frees the lock 30 s after a crash

    def post(self, request: HttpRequest, supplier: str) -> HttpResponse:
        rows = import_catalog(supplier)
        return HttpResponse(f"Imported {rows} rows from {supplier}.\n", content_type="text/plain")

    def handle_lock_conflict(self, holders: list[LockInfo]) -> HttpResponseBase:
        # Say who started the import that is running, and since when.
        holder = holders[0] if holders else None
        response = JsonResponse(
            {
                "error": "import running",
                "started_by": holder.metadata.get("user") if holder else None,
                "running_for": round(holder.held_for, 1) if holder else None,
            },
            status=409,
        )
        response["Retry-After"] = "5"
        return response
