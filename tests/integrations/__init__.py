"""The parts built on the locks: views, Celery, admin, manage.py locks, listing, settings,
checks, the testing helpers users import, and the documented import paths."""
