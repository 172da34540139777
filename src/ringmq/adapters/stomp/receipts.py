"""The RECEIPTs of SENDs, released in order as the core confirms the SENDs.

Theory of operation: a connection's SENDs outside transactions are numbered by the core once
its publish session is in confirm mode (`Session.publish_seq`); a SEND that asks a receipt is
`expect`ed under its number. The core confirms publishes singly or cumulatively (`multiple`),
and not always in order (a persistent message's confirm may wait for the fsync while a later
transient one is confirmed at once). `confirmed` keeps the highest number under which every
publish is confirmed and returns the receipts at or below it, oldest first: a RECEIPT means
that SEND and every earlier one are taken. Pure bookkeeping: no broker, no frames.
"""

from __future__ import annotations


class Receipts:
    """Receipt ids waiting for confirms (see the module docstring)."""

    def __init__(self) -> None:
        self.pending: dict[int, str] = {}
        """Receipt id by publish sequence number, in number order."""
        self.confirmed_upto = 0
        """Every publish up to this number is confirmed."""
        self._above: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self.pending)

    def expect(self, seq: int, receipt: str) -> None:
        """Publish `seq` answers with RECEIPT `receipt` once confirmed."""
        self.pending[seq] = receipt

    def refused(self, seq: int) -> str | None:
        """The receipt id of refused publish `seq`, if it asked one."""
        return self.pending.get(seq)

    def confirmed(self, seq: int, multiple: bool) -> list[str]:
        """Publish `seq` (and every earlier one when `multiple`) is settled: the receipt ids
        now due, in order."""
        if multiple:
            self.confirmed_upto = max(self.confirmed_upto, seq)
        else:
            self._above.add(seq)
        above = self._above
        while self.confirmed_upto + 1 in above:
            self.confirmed_upto += 1
            above.discard(self.confirmed_upto)
        pending = self.pending
        due: list[str] = []
        while pending:
            first = next(iter(pending))  # the oldest: sequence numbers only grow
            if first > self.confirmed_upto:
                break
            due.append(pending.pop(first))
        return due
