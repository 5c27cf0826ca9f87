"""The test suite: contract/, backends/, integrations/, and support/ (helpers, no tests)."""
