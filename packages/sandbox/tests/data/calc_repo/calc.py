def add(a, b):
    return a - b  # the bug the agent fixes
