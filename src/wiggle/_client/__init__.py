"""The client package: value types, the request builders, and the two clients.

``aio.AsyncClient`` is written by hand; ``sync.Client`` is generated from it by
scripts/gen_sync_client.py (tests/server/test_client_drift.py keeps them in step). The public
face is wiggle/client.py.
"""
