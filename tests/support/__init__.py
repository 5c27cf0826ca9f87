"""Code the tests share, and code their workers and subprocesses run; no tests here."""
