"""A connection string libpq cannot parse is refused without its password in the message (libpq
quotes the string back: ``missing "=" after "mysql://u:hunter2@host/x"``)."""

from __future__ import annotations

import pytest

from wiggle import InvalidArgument
from wiggle._storage.postgres.db import failover_conninfo


@pytest.mark.parametrize("url", ["mysql://u:hunter2@host/x", "host=h password=hunter2 = dbname"])
def test_an_unparsable_connection_string_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        failover_conninfo(url)
    assert "invalid PostgreSQL connection string" in str(caught.value)
    assert "hunter2" not in str(caught.value), caught.value
