"""Root conftest: loads the package's pytest plugin after coverage has started."""

pytest_plugins = ["django_redis_lock.testing.pytest_plugin"]
