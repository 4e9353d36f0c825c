import pytest

# The shipped suite's asserts should explain themselves when they fail here.
pytest.register_assert_rewrite("agentsandbox.testing")
