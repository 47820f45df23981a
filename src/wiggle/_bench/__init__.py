"""The end-to-end benchmark (``wiggle bench``, ``python bench/e2e.py``)."""
