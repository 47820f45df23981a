"""Transport security and access control: TLS material, credentials, tokens, roles.

Nothing here imports the server or a store: the client and the worker use
``credentials.py``; the server adds ``tls.py`` (server certificates, reloaded when they change),
``tokens.py`` (the identities a deployment knows) and ``roles.py`` (what each role may call).
The rules are in docs/semantics.md#security.
"""
