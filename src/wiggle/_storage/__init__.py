"""Stores: the Store protocol, the in-memory store and the PostgreSQL store."""
