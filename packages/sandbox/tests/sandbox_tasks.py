"""Tasks shared by the environment tests."""

from pathlib import Path

CALC_REPO = str(Path(__file__).parent / "data" / "calc_repo")

CALC_TASK = {
    "id": "calc-add",
    "description": "Fix add() in calc.py so the tests pass.",
    "repo": CALC_REPO,
    "setup_commands": ["git init -q && git add -A && git commit -qm init"],
    "test_command": "python3 -m unittest -q check_calc",
}
FIX = {"tool": "edit_file", "params": {"path": "calc.py", "old_str": "a - b", "new_str": "a + b"}}

KB = [
    {"title": "Refunds", "content": "Refunds are issued within 14 days of a return."},
    {"title": "Shipping", "content": "Standard shipping takes 3 to 5 business days."},
    "Gift cards cannot be refunded.",
]
ORDERS = [
    {"order_id": "A100", "customer": "ana", "status": "shipped"},
    {"order_id": "A101", "customer": "bo", "status": "processing"},
]
SUPPORT_TASK = {
    "id": "order-status",
    "description": "The user asks where order A101 is.",
    "records": ORDERS,
    "knowledge_base": KB,
    "documents": KB,
    "expected_answer": "processing",
    "user_instructions": "You want to know the status of order A101.",
}

#: A two-order shop: one delivered order, one pending (the retail rule and hostile-input tests).
RETAIL_WORLD = {
    "users": [{"user_id": "u1", "name": "A B", "email": "a@b.c", "address": "1 X St"}],
    "orders": [
        {
            "order_id": "#W1",
            "user_id": "u1",
            "status": "delivered",
            "address": "1 X St",
            "items": [{"item_id": "I1", "name": "lamp", "price": 10.0}],
        },
        {
            "order_id": "#W2",
            "user_id": "u1",
            "status": "pending",
            "address": "1 X St",
            "items": [{"item_id": "I2", "name": "mug", "price": 5.5}],
        },
    ],
}
