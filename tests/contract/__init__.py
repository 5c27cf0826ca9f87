"""The contract of lock() and alock(): what every backend promises, run on each backend."""
