"""The ``wiggle`` command, one module per verb group (the entry point is wiggle/cli.py ``main``).

- ``parser``: the global options and the verb groups put together (``build_parser``)
- ``server``: server, migrate, demo
- ``worker``: worker (blueprints by import path, every WorkerOptions field, --processes)
- ``instances``: start, get, history, cancel, list, complete-task, signal, retry
- ``schedules``: schedule create|update|get|list|pause|resume|delete|trigger
- ``admin``: token, doctor, workflows, queues, describe, bench
- ``ops``: what admin's verbs print and check; ``common`` and ``views``: the client, JSON and
  text output every verb shares
"""
