"""Sphinx configuration of the django-redis-lock documentation.

Build the pages with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` and
run their examples with ``python -m sphinx -W --keep-going -b doctest docs docs/_build/doctest``
(both from the repository root). Links to the Python, Django, Celery and redis-py
documentation need their inventories from the network, so they are only set up when
``DOCS_INTERSPHINX=1`` is in the environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports the package, and the package reads Django settings: use the test suite's
# settings (whatever the shell says), which never contact a server on import.
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import django  # noqa: E402

django.setup()

import django_redis_lock  # noqa: E402

# -- Project ---------------------------------------------------------------------------------

project = "django-redis-lock"
author = "django-redis-lock contributors"
copyright = "django-redis-lock contributors"
release = django_redis_lock.__version__
version = ".".join(release.split(".")[:2])

# -- General ---------------------------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build"]
default_role = "code"
nitpicky = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# -- Intersphinx (needs the network, so only on request) --------------------------------------

intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
if os.environ.get("DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "django": (
            "https://docs.djangoproject.com/en/5.2/",
            "https://docs.djangoproject.com/en/5.2/_objects/",
        ),
        "celery": ("https://docs.celeryq.dev/en/stable/", None),
        "redis": ("https://redis.readthedocs.io/en/stable/", None),
    }

# -- Doctest ---------------------------------------------------------------------------------

# Every example runs on the in-process backend, so the doctests need no Redis server. The
# examples behave the same on Redis: both backends fulfil one contract.
# The examples that lose a lease on purpose log a warning; keep it out of the build's output.
doctest_global_setup = """
import logging
from django.test import override_settings
from django_redis_lock.testing import locmem_locks

if not logging.getLogger("django_redis_lock").handlers:
    logging.getLogger("django_redis_lock").addHandler(logging.NullHandler())

_docs_locks = override_settings(LOCKS=locmem_locks())
_docs_locks.enable()
"""
doctest_global_cleanup = """
_docs_locks.disable()
"""

# -- HTML ------------------------------------------------------------------------------------

html_theme = "alabaster"
html_title = f"django-redis-lock {release}"
html_theme_options = {
    "description": "Distributed locks on Redis for Django and Celery.",
    "fixed_sidebar": True,
}


def setup(app: Sphinx) -> None:
    """Add the ``setting`` role and directive, as Django's own documentation has them."""
    # With intersphinx on, :setting:`STORAGES` links to Django's documentation.
    app.add_crossref_type(
        directivename="setting",
        rolename="setting",
        indextemplate="pair: %s; setting",
    )
