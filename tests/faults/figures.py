"""The fault suite's figures: each fault test reports one line; the run prints them all.

    report("broker-kill", f"{acked} acknowledged, {read} read back, {dups} duplicates")

The lines are printed at the end of the pytest run (``tests/conftest.py``'s terminal
summary), whatever the capture mode, so ``make test-faults`` shows them without the
services' logs.
"""

from __future__ import annotations

FIGURES: list[str] = []


def report(fault: str, figures: str) -> None:
    FIGURES.append(f"FAULT {fault}: {figures}")
