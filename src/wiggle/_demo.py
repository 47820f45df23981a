"""The sample workflow of ``wiggle demo``: an order pipeline with a gate, run by a worker process."""

from __future__ import annotations

import sys

import msgspec

from ._model import ExecutionMode, RetryPolicy
from .errors import RetryableError
from .worker import Step, Worker, WorkerOptions
from .workflow import Blueprint, Workflow

__all__ = ["Order", "blueprint", "run_worker"]


class Order(msgspec.Struct):
    """The demo's context."""

    order_id: str
    quantity: int
    in_stock: bool = True
    total_cents: int = 0
    charged: bool = False
    shipped: bool = False
    charge_attempts: int = 0


def validate(order: Order) -> Order:
    if order.quantity <= 0:
        raise ValueError(f"quantity must be positive, got {order.quantity}")
    return order


def check_stock(order: Order) -> bool:
    return order.in_stock


def price(order: Order) -> Order:
    order.total_cents = order.quantity * 1250
    return order


def charge(order: Order) -> Order:
    # Fails on the first attempt, to show a retry; Step.current() tells the attempt.
    order.charge_attempts = Step.current().attempt
    if Step.current().attempt == 1:
        # a failure the demo plans: RetryableError is logged in one line, without a traceback
        raise RetryableError("payment gateway timed out (simulated)")
    order.charged = True
    return order


def ship(order: Order) -> Order:
    order.shipped = True
    return order


def blueprint(mode: ExecutionMode = ExecutionMode.DEFAULT) -> Blueprint[Order]:
    """The demo workflow, in ``mode``."""
    return (
        Workflow.define("demo-orders", Order)
        .execution(mode)
        .step(validate)
        .gate(check_stock)
        .step(price)
        .step(charge, retry=RetryPolicy.fixed(3, 0.2))
        .checkpoint()
        .step(ship)
        .build()
    )


def run_worker(target: str, mode: str) -> None:
    """Serve the demo workflow until SIGTERM."""
    Worker(target, [blueprint(ExecutionMode(mode))], WorkerOptions(concurrency=8)).run()


if __name__ == "__main__":
    run_worker(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "DEFAULT")
