"""A Jepsen-style nemesis on the deployed shape: a seeded fault schedule, clients that
record their history, and a pure checker of the invariants over that history."""
