"""The engine: pure state transitions shared by every store."""
