"""The conditional-node example (``examples/flows/orders.yaml``): pure functions, no
database writes, no data files."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cyclone_flow import Context

PRICES = {"book": 12.5, "lamp": 40.0, "mug": 8.0}
"""Unit prices; an unknown SKU costs 0 (and is never shipped: its total is 0)."""

IN_STOCK = {"book": 10, "mug": 3}
"""Units in stock by SKU (the lamp is sold out)."""


def price(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"sku", "qty"}`` -> ``{"unit", "total"}`` (0 for an unknown SKU)."""
    unit = PRICES.get(input["sku"], 0.0)
    return {"unit": unit, "total": round(unit * int(input["qty"]), 2)}


def stock(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"sku", "qty"}`` -> ``{"available": bool, "left": units in stock}``."""
    left = IN_STOCK.get(input["sku"], 0)
    return {"available": left >= int(input["qty"]), "left": left}


def ship(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"sku", "qty"}`` -> ``{"parcel": an id derived from the run and the SKU}``."""
    digest = hashlib.sha256(f"{ctx.run_id}:{input['sku']}".encode()).hexdigest()[:10]
    return {"parcel": f"P-{digest}", "qty": input["qty"]}


def track(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"parcel"}`` -> ``{"tracking": URL}``."""
    return {"tracking": f"https://parcels.example/{input['parcel']}"}


def wrap(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"sku"}`` -> ``{"wrapped": True}``."""
    return {"wrapped": True, "sku": input["sku"]}


def receipt(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"total", "parcel" (null: not shipped), "wrapped" (null: not wrapped)}`` -> the
    receipt's lines."""
    lines = [f"total: {input['total']:.2f}"]
    lines.append(f"parcel: {input['parcel']}" if input["parcel"] else "not shipped: out of stock")
    if input["wrapped"]:
        lines.append("gift-wrapped")
    return {"lines": lines, "shipped": input["parcel"] is not None}
