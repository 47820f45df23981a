"""Transport security and access control: TLS material, credentials, tokens, roles.

Nothing here imports the server or a store: the client and the worker use
``credentials.py``; the server adds ``tls.py`` (server certificates, reloaded when they change),
``tokens.py`` (the identities a deployment knows), ``roles.py`` (what each role may call) and
``file_checks.py`` (warnings about files others may change, a certificate out of date).
The rules are in docs/semantics.md#security.
"""
