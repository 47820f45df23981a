"""Upstream Wiggle's protocol, translated: its definition JSON and its protobuf values.

``definitions`` turns upstream's camelCase workflow definitions into ours and back
(docs/upstream.md has the mapping table); ``values`` converts ``google.protobuf.Value`` and
``Struct`` to and from plain Python. ``fields`` reads typed fields out of upstream's JSON with
errors that name the node and the field.
"""
