"""The shop app: home of the ``demo`` command."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    """A shop whose invoices must never be processed twice at once."""

    name = "shop"
