"""The owner's refusal codes and the origin's confirm reasons (ringmq.shardlink.codes)."""

from __future__ import annotations

from ringmq.core.published import ADDRESS_FULL, OVERFLOW
from ringmq.core.transactions import STORE_FAILED
from ringmq.shardlink import codes


def test_a_refusal_reason_crosses_the_link_and_back() -> None:
    for reason in (OVERFLOW, ADDRESS_FULL, STORE_FAILED):
        assert codes.reason_of(codes.of_reason(reason)) == reason


def test_another_code_names_itself() -> None:
    assert codes.reason_of(codes.NOT_FOUND) == "refused-404"
    assert codes.reason_of(530) == "refused-530"
