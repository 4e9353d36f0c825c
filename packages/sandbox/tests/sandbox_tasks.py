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
