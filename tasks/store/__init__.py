"""The storey below the contract: everything that talks to Redis or an output backend.

``tasks/`` says what crosses a process boundary (schemas, names, the run message, the record's format);
this package stores and moves it: the job store and its Lua scripts, fleet, outbox, queue limit,
idempotency, the Redis client and kombu transport, the Celery app, and the output backends.
"""
