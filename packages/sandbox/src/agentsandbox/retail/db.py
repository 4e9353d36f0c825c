"""The retail shop's database: an embedded SQLite database built per episode, and its tools.

A *world* is a plain dict of rows (``users``, ``orders``, ``items``) so a task record can carry
its whole shop and stay self-contained. ``open_shop(world)`` loads it into a private in-memory
database; ``call_tool(db, name, params)`` runs one tool against it and returns a ``ToolResult``
whose output is compact JSON. Business rules, as a real shop's API would enforce them:

* only ``pending`` orders can be cancelled (with a reason from ``CANCEL_REASONS``) or have
  their shipping address changed;
* only items of ``delivered`` orders can be returned, each at most once.

A cancelled order of the world may carry its ``cancel_reason``; ``get_order`` shows it.

Breaking a rule is an error observation, never an exception: the agent can read it and
recover; so is a value SQLite cannot bind (a lone surrogate, an integer beyond 64 bits).
``state_digest(db)`` fingerprints the mutable state, so success can be judged by the
database's end state (as tau-bench does) rather than by what the agent claims.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from knowlyrcore.models import ToolResult

CANCEL_REASONS = ("no longer needed", "ordered by mistake")

_SCHEMA = """
CREATE TABLE users (user_id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE, address TEXT NOT NULL);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(user_id),
                     status TEXT NOT NULL, address TEXT NOT NULL, cancel_reason TEXT);
CREATE TABLE items (item_id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(order_id),
                    name TEXT NOT NULL, price REAL NOT NULL, returned INTEGER NOT NULL DEFAULT 0);
"""


def open_shop(world: dict[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory database holding ``world``'s users, orders and items."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(_SCHEMA)
    try:
        db.executemany("INSERT INTO users VALUES (:user_id, :name, :email, :address)", world["users"])
        db.executemany(
            "INSERT INTO orders VALUES (:order_id, :user_id, :status, :address, :cancel_reason)",
            [{"cancel_reason": None, **o} for o in world["orders"]],
        )
        db.executemany(
            "INSERT INTO items VALUES (:item_id, :order_id, :name, :price, 0)",
            [{**item, "order_id": o["order_id"]} for o in world["orders"] for item in o["items"]],
        )
    except (KeyError, TypeError, UnicodeEncodeError, OverflowError, sqlite3.Error) as exc:
        db.close()
        raise ValueError(f"malformed retail world: {exc}") from exc
    db.commit()
    return db


def state_digest(db: sqlite3.Connection) -> str:
    """A hash of everything the tools can change (order status, address, reason, returns)."""
    rows = db.execute("SELECT order_id, status, address, cancel_reason FROM orders ORDER BY order_id").fetchall()
    items = db.execute("SELECT item_id, returned FROM items ORDER BY item_id").fetchall()
    payload = json.dumps([[tuple(r) for r in rows], [tuple(i) for i in items]])
    return hashlib.sha256(payload.encode()).hexdigest()


def state_facts(db: sqlite3.Connection) -> dict[tuple[str, str], Any]:
    """Every field the tools can change, keyed by ``(row id, column)``: what ``state_digest``
    hashes, readable one field at a time (partial credit counts changes field by field)."""
    facts: dict[tuple[str, str], Any] = {}
    for row in db.execute("SELECT order_id, status, address, cancel_reason FROM orders"):
        for column in ("status", "address", "cancel_reason"):
            facts[(row["order_id"], column)] = row[column]
    for row in db.execute("SELECT item_id, returned FROM items"):
        facts[(row["item_id"], "returned")] = row["returned"]
    return facts


def _ok(value: Any) -> ToolResult:
    return ToolResult(output=json.dumps(value, ensure_ascii=False))


#: The longest error message: a policy's 10 MB argument is not echoed back whole.
MAX_ERROR_CHARS = 500


def clip_message(text: str) -> str:
    """``text`` cut to ``MAX_ERROR_CHARS``, any lone surrogate escaped, so an error that quotes a
    policy's argument stays short and encodable."""
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}... ({len(text) - MAX_ERROR_CHARS} characters cut)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _error(message: str) -> ToolResult:
    return ToolResult(error=clip_message(message))


def _order(db: sqlite3.Connection, order_id: str) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM orders WHERE order_id = ?", (order_id,)).fetchone()


def find_user_by_email(db: sqlite3.Connection, email: str) -> ToolResult:
    row = db.execute("SELECT user_id, name FROM users WHERE lower(email) = lower(?)", (email.strip(),)).fetchone()
    return _ok(dict(row)) if row else _error(f"no user with email {email!r}")


def find_user_by_name(db: sqlite3.Connection, name: str) -> ToolResult:
    rows = db.execute(
        "SELECT user_id, email FROM users WHERE lower(name) = lower(?) ORDER BY user_id", (name.strip(),)
    ).fetchall()
    return _ok([dict(r) for r in rows]) if rows else _error(f"no user named {name!r}")


def get_user(db: sqlite3.Connection, user_id: str) -> ToolResult:
    row = db.execute("SELECT * FROM users WHERE user_id = ?", (user_id,)).fetchone()
    if row is None:
        return _error(f"no user {user_id!r}")
    orders = [r[0] for r in db.execute("SELECT order_id FROM orders WHERE user_id = ? ORDER BY order_id", (user_id,))]
    return _ok({**dict(row), "orders": orders})


def list_orders(db: sqlite3.Connection, user_id: str) -> ToolResult:
    if db.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone() is None:
        return _error(f"no user {user_id!r}")
    rows = db.execute(
        "SELECT o.order_id, o.status, round(sum(i.price), 2) AS total FROM orders o JOIN items i USING (order_id) "
        "WHERE o.user_id = ? GROUP BY o.order_id ORDER BY o.order_id",
        (user_id,),
    ).fetchall()
    return _ok([dict(r) for r in rows])


def get_order(db: sqlite3.Connection, order_id: str) -> ToolResult:
    order = _order(db, order_id)
    if order is None:
        return _error(f"no order {order_id!r}")
    items = db.execute(
        "SELECT item_id, name, price, returned FROM items WHERE order_id = ? ORDER BY item_id", (order_id,)
    ).fetchall()
    reason = {"cancel_reason": order["cancel_reason"]} if order["status"] == "cancelled" else {}
    return _ok(
        {
            "order_id": order["order_id"],
            "user_id": order["user_id"],
            "status": order["status"],
            **reason,
            "address": order["address"],
            "items": [{**dict(i), "returned": bool(i["returned"])} for i in items],
        }
    )


def cancel_order(db: sqlite3.Connection, order_id: str, reason: str) -> ToolResult:
    order = _order(db, order_id)
    if order is None:
        return _error(f"no order {order_id!r}")
    if order["status"] != "pending":
        return _error(f"order {order_id} is {order['status']}; only pending orders can be cancelled")
    if reason not in CANCEL_REASONS:
        return _error(f"reason must be one of {', '.join(repr(r) for r in CANCEL_REASONS)}")
    db.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?", (reason, order_id))
    return _ok({"order_id": order_id, "status": "cancelled"})


def change_address(db: sqlite3.Connection, order_id: str, address: str) -> ToolResult:
    order = _order(db, order_id)
    if order is None:
        return _error(f"no order {order_id!r}")
    if order["status"] != "pending":
        return _error(f"order {order_id} is {order['status']}; only pending orders can change address")
    if not address.strip():
        return _error("address must not be empty")
    db.execute("UPDATE orders SET address = ? WHERE order_id = ?", (address.strip(), order_id))
    return _ok({"order_id": order_id, "address": address.strip()})


def return_items(db: sqlite3.Connection, order_id: str, item_ids: list[str]) -> ToolResult:
    order = _order(db, order_id)
    if order is None:
        return _error(f"no order {order_id!r}")
    if order["status"] != "delivered":
        return _error(f"order {order_id} is {order['status']}; only delivered orders can be returned")
    if not item_ids:
        return _error("item_ids must name at least one item")
    found = {
        r["item_id"]: r["returned"]
        for r in db.execute("SELECT item_id, returned FROM items WHERE order_id = ?", (order_id,))
    }
    for item_id in item_ids:
        if item_id not in found:
            return _error(f"order {order_id} has no item {item_id!r}")
        if found[item_id]:
            return _error(f"item {item_id} was already returned")
    db.executemany("UPDATE items SET returned = 1 WHERE item_id = ?", [(i,) for i in item_ids])
    return _ok({"order_id": order_id, "returned": list(item_ids)})


#: Tool name -> implementation. ``respond`` is not here: it ends the episode (the env handles it).
TOOL_FUNCTIONS: dict[str, Callable[..., ToolResult]] = {
    f.__name__: f
    for f in (
        find_user_by_email,
        find_user_by_name,
        get_user,
        list_orders,
        get_order,
        cancel_order,
        change_address,
        return_items,
    )
}


def call_tool(db: sqlite3.Connection, name: str, params: dict[str, Any]) -> ToolResult:
    """Run tool ``name`` (parameters already schema-checked) and commit what it changed."""
    function = TOOL_FUNCTIONS.get(name)
    if function is None:
        return _error(f"unknown tool {name!r}")
    try:
        result = function(db, **params)
    except (UnicodeEncodeError, OverflowError, sqlite3.InterfaceError) as exc:
        # a value SQLite cannot bind is the caller's bad input, not a crash (the message escapes it)
        db.rollback()
        return _error(f"tool {name!r}: a parameter cannot be stored: {exc}")
    db.commit()
    return result
