"""The example worker module the deployment recipes run (deploy/compose.yaml, deploy/systemd/).

``wiggle worker shop_flows:ALL`` (with this folder on the import path: ``--path`` or
``WIGGLE_WORKER_PATH``) serves both workflows below; replace it with your own module. Two
workflows on two queues, so a worker fleet can be split by queue (``--queues payments``).
Start one with ``wiggle start orders --context '{"order_id": "o-1", "quantity": 3}' --wait``.
"""

from __future__ import annotations

import msgspec

from wiggle import ExecutionMode, RetryPolicy, Workflow


class Order(msgspec.Struct):
    order_id: str
    quantity: int
    total_cents: int = 0
    charged: bool = False
    receipt: str = ""


def price(order: Order) -> Order:
    if order.quantity <= 0:
        raise ValueError(f"quantity must be positive, got {order.quantity}")
    order.total_cents = order.quantity * 1250
    return order


def in_stock(order: Order) -> bool:  # a gate: False ends the instance COMPLETED, "gated:in_stock"
    return order.quantity < 100


async def charge(order: Order) -> Order:  # runs on the payments queue's workers
    order.charged = True
    return order


def receipt(order: Order) -> Order:
    order.receipt = f"{order.order_id}: {order.total_cents / 100:.2f}"
    return order


orders = (
    Workflow.define("orders", Order)
    .execution(ExecutionMode.LOCAL_SYNC)
    .step(price)
    .gate(in_stock)
    .step(charge, queue="payments", retry=RetryPolicy.exponential(5, 0.1))
    .step(receipt)
    .build()
)


class Refund(msgspec.Struct):
    order_id: str
    amount_cents: int
    refunded: bool = False


def refund(r: Refund) -> Refund:
    if r.amount_cents <= 0:
        raise ValueError(f"amount_cents must be positive, got {r.amount_cents}")
    r.refunded = True
    return r


refunds = Workflow.define("refunds", Refund).step(refund, queue="payments").build()

#: What `wiggle worker shop_flows:ALL` serves.
ALL = [orders, refunds]
