"""What every lock handle decides, private to the package: import from the public faces instead.

The acquire loop (:mod:`.steps`, :mod:`.handle`), a handle's arguments and their rules
(:mod:`.lock_arguments`, :mod:`.validation`), what an owner holds (:mod:`.holds`, :mod:`.owner`),
lease renewal and withdrawals (:mod:`.renewal`), how a loss is reported (:mod:`.losses`), the
metrics hooks (:mod:`.observe`), the multi-lock's plan and what its twins share
(:mod:`.multi_steps`, :mod:`.multi`), a handle as a decorator (:mod:`.decorating`), long names
(:mod:`.names`), what asyncio handles add: cancellations, the holder's loop (:mod:`.aio`), the
errors behind an error (:mod:`.causes`), and the error naming a missing extra (:mod:`.extras`).

Nothing here is imported by this ``__init__``: importing one module of the package costs only
that module and what it needs.
"""
