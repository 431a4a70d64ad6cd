"""The shop: the bundled tasks' small world of bank accounts and an inventory, and its six tools.

The world::

    {"accounts": {"checking": 12000, "savings": 50000, "operating": 30000},   # balances in cents
     "inventory": {"widget": {"stock": 4, "price_cents": 250, "cost_cents": 120}, ...}}

Amounts are integer cents (no float rounding in a goal comparison). Every tool is a pure function of the
world and its arguments; a refusal (an unknown account, not enough money) is a ``ValueError`` the model reads
as the call's error.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from rewardpipe.envs.tool_call.tools import Toolset, tool

World = dict[str, Any]
Cents = Annotated[int, Field(gt=0, le=1_000_000_000)]
Quantity = Annotated[int, Field(ge=1, le=1000)]
#: The account restocking is paid from.
PAYING_ACCOUNT = "operating"


def _account(world: World, name: str) -> int:
    if name not in world["accounts"]:
        raise ValueError(f"no account named {name[:60]!r}; accounts: {', '.join(sorted(world['accounts']))}")
    return world["accounts"][name]


def _item(world: World, name: str) -> dict[str, Any]:
    if name not in world["inventory"]:
        raise ValueError(f"no item named {name[:60]!r}; items: {', '.join(sorted(world['inventory']))}")
    return world["inventory"][name]


@tool
def list_items(world: World) -> tuple[list[str], World]:
    """List the names of the items the shop sells."""
    return sorted(world["inventory"]), world


@tool
def get_stock(world: World, item: str) -> tuple[dict[str, Any], World]:
    """How many of an item are in stock, its price and what one costs the shop to restock.

    Args:
        item: the item's name, as list_items gives it.
    """
    found = _item(world, item)
    return {
        "item": item,
        "stock": found["stock"],
        "price_cents": found["price_cents"],
        "cost_cents": found["cost_cents"],
    }, world


@tool
def restock(world: World, item: str, quantity: Quantity) -> tuple[dict[str, Any], World]:
    """Buy more of an item: quantity times its cost is paid from the operating account.

    Args:
        item: the item's name.
        quantity: how many to buy (1 to 1000).
    """
    found = _item(world, item)
    cost = quantity * found["cost_cents"]
    balance = _account(world, PAYING_ACCOUNT)
    if cost > balance:
        raise ValueError(
            f"restocking {quantity} {item} costs {cost} cents; the {PAYING_ACCOUNT} account holds {balance}"
        )
    found["stock"] += quantity
    world["accounts"][PAYING_ACCOUNT] = balance - cost
    return {"item": item, "stock": found["stock"], "paid_cents": cost}, world


@tool
def set_price(world: World, item: str, price_cents: Cents) -> tuple[dict[str, Any], World]:
    """Set the price of an item.

    Args:
        item: the item's name.
        price_cents: the new price, in cents.
    """
    _item(world, item)["price_cents"] = price_cents
    return {"item": item, "price_cents": price_cents}, world


@tool
def get_balance(world: World, account: str) -> tuple[dict[str, Any], World]:
    """The balance of a bank account, in cents.

    Args:
        account: the account's name (checking, savings, operating...).
    """
    return {"account": account, "balance_cents": _account(world, account)}, world


@tool
def transfer(world: World, source: str, target: str, amount_cents: Cents) -> tuple[dict[str, Any], World]:
    """Move money from one account to another.

    Args:
        source: the account the money leaves.
        target: the account it goes to.
        amount_cents: how much, in cents.
    """
    available, _ = _account(world, source), _account(world, target)
    if source == target:
        raise ValueError("source and target are the same account")
    if amount_cents > available:
        raise ValueError(f"{source} holds {available} cents, less than {amount_cents}")
    world["accounts"][source] -= amount_cents
    world["accounts"][target] += amount_cents
    return {
        "source": source,
        "target": target,
        "moved_cents": amount_cents,
        "source_balance_cents": world["accounts"][source],
    }, world


SHOP = Toolset([list_items, get_stock, restock, set_price, get_balance, transfer])
