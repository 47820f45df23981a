"""The dashboard's pages rendered from API-shaped data, without a server: what each page shows for
the states an operator meets (a lagging queue, a signal wait, a retrying step ...)."""

from __future__ import annotations

from wiggle._server.web import pages


def queue(name: str, lagging: bool) -> dict[str, object]:
    return {
        "queue": name,
        "ready": 3,
        "delayed": 0,
        "oldest_ready_age_ms": 95_000,
        "running": 0,
        "in_local_run": 0,
        "lag": {"lagging": lagging, "rate_per_second": 1.5},
        "schedule_to_start": None,
        "workers": [],
    }


def test_a_lagging_queue_is_highlighted_once_in_one_class_attribute() -> None:
    html = pages.queues_html({"now": 0, "queues": [queue("slow", True), queue("fine", False)]})
    slow, fine = html.split('data-queue="slow"')[1].split('data-queue="fine"')
    assert '<td class="num oldest err lagging">' in slow
    assert '<td class="num oldest">' in fine and "lagging" not in fine
    for row in (slow, fine):  # one class attribute per cell: a second one is ignored by browsers
        assert all(cell.count("class=") <= 1 for cell in row.split("<td")[1:])
