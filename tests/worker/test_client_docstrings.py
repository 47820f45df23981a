"""A keyword a client method's docstring writes as ``name=`` is that method's own argument, or
the docstring says whose it is ("a client made with ``patience=0``").

``Client.wait``'s docstring said Unavailable comes "at once with ``patience=0``", but ``wait`` has
no ``patience``: it is the client's (``Client(target, patience=0)``), and ``wait(..., patience=0)``
is a TypeError (an outside trial). Both faces are checked: the sync one is generated from the
async one (scripts/gen_sync_client.py).
"""

from __future__ import annotations

import inspect
import re

import pytest

from wiggle.client import AsyncClient, Client


@pytest.mark.parametrize("face", [AsyncClient, Client], ids=lambda c: c.__name__)
def test_a_keyword_in_a_method_docstring_is_the_methods_or_says_whose(face: type) -> None:
    wrong = []
    for name, method in inspect.getmembers(face, inspect.isfunction):
        if name.startswith("_"):
            continue
        doc = " ".join((inspect.getdoc(method) or "").split())
        parameters = set(inspect.signature(method).parameters)
        for found in re.finditer(r"(\S+ \S+ )?``(\w+)=", doc):
            said_whose = (found.group(1) or "").strip() == "made with"
            if found.group(2) not in parameters and not said_whose:
                wrong.append(f"{face.__name__}.{name}: ``{found.group(2)}=``")
    assert not wrong, wrong
    assert "patience" in inspect.signature(face).parameters  # the client's, as the docstrings say
