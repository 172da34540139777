from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringmq.adapters.amqp10  # noqa: F401 - registers the AMQP 1.0 form and its conversions
from ringmq.core.message import Message, SeqId, amqp091_content
from ringmq.core.queue.columns import Columns
from ringmq.storage.pager import BodySpill, Pager
from ringmq.storage.paging import PageQueue
from ringmq.storage.records import Entry


def entry(seq: int, body: bytes = b"", **kw: object) -> Entry:
    m = Message("", "q", b"\x00\x00", body or f"m{seq}".encode())
    return Entry("", SeqId(seq), m, **kw)  # type: ignore[arg-type]


def seqs(items: Sequence[tuple[int, Message, int | None]]) -> list[int]:
    return [seq for seq, _, _ in items]


def test_push_back_pop_in_order_across_runs(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path, run_bytes=500, read_bytes=200)
    pq.push_back(entry(i) for i in range(100))
    assert len(pq) == 100
    assert pq.files() > 5
    got: list[int] = []
    while pq:
        got += seqs(pq.pop_front(7))
    assert got == list(range(100))
    assert pq.files() == 0
    assert not list(tmp_path.iterdir())


def test_push_front_goes_before_everything(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path, run_bytes=300)
    pq.push_back(entry(i) for i in range(10, 20))
    pq.push_front([entry(5), entry(6)])
    pq.push_front([entry(1), entry(2), entry(3)])
    pq.push_back([entry(20)])
    assert seqs(pq.pop_front(100)) == [1, 2, 3, 5, 6, *range(10, 21)]


def test_fields_and_store_ref_round_trip(tmp_path: Path) -> None:
    # a page-in gives the spill store's item: seq, message (store ref kept), expiry
    pq = PageQueue(tmp_path)
    e = entry(4, b"payload", delivery_count=2, expiry_ms=99, due_ms=7, redelivered=True)
    e.message.store_ref = 42
    e.message.priority = 3
    pq.push_back([e])
    ((seq, msg, expires_at),) = pq.pop_front(1)
    assert (seq, expires_at) == (4, 99)
    assert (msg.body, msg.store_ref, msg.priority) == (b"payload", 42, 3)


def test_every_message_field_round_trips(tmp_path: Path) -> None:
    # Records are decoded in place in the chunk read from the page file: offsets must hold
    # with a header table between the message id and the properties.
    pq = PageQueue(tmp_path, read_bytes=64)
    sent = []
    for i in range(6):
        m = Message(
            "ex",
            f"rk.{i}",
            b"\x00\x80\x02m%d" % i,
            b"body %d" % i,
            {"i": i, "s": "x" * i} if i % 2 else None,
            i % 3,
            1000 + i if i % 3 == 0 else None,
            i % 2 == 0,
            f"mid-{i}" if i != 4 else None,
            1_700_000_000_000 + i,
        )
        sent.append(m)
    pq.push_back(Entry("", SeqId(i + 1), m) for i, m in enumerate(sent))
    back = pq.pop_front(3) + pq.pop_front(10)
    assert seqs(back) == [1, 2, 3, 4, 5, 6]
    fields = [
        "exchange",
        "routing_key",
        "properties_bin",
        "body",
        "headers",
        "priority",
        "expiration_ms",
        "persistent",
        "message_id",
        "timestamp_ms",
    ]
    for (_, got, _), want in zip(back, sent, strict=True):
        assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]


def test_a_corrupt_page_stops_at_the_last_good_record(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path, read_bytes=64)
    pq.push_back(entry(i, b"%03d" % i * 10) for i in range(10))
    (page,) = [f for f in tmp_path.rglob("*") if f.is_file() and f.stat().st_size]
    raw = bytearray(page.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a flipped bit in a record in the middle of the run
    page.write_bytes(bytes(raw))
    got: list[tuple[int, Message, int | None]] = []

    def drain() -> None:  # one at a time: what precedes the damage comes back intact
        for _ in range(10):
            got.extend(pq.pop_front(1))

    with pytest.raises(RuntimeError, match="corrupt"):
        drain()
    assert 0 < len(got) < 10
    assert [m.body for _, m, _ in got] == [b"%03d" % i * 10 for i in range(len(got))]


def test_byte_limit_and_huge_records(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path, read_bytes=1024)
    pq.push_back([entry(0, b"a" * 5000), entry(1, b"b" * 10), entry(2, b"c" * 10)])
    assert pq.body_bytes == 5020
    first = pq.pop_front(10, max_bytes=100)
    assert seqs(first) == [0]  # at least one, even when larger than max_bytes
    assert first[0][1].body == b"a" * 5000
    assert seqs(pq.pop_front(10, max_bytes=15)) == [1, 2]


def test_discard_tombstones(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path)
    pq.push_back(entry(i, b"xx") for i in range(5))
    pq.discard(1, 2)
    pq.discard(3, 2)
    assert len(pq) == 3
    assert pq.body_bytes == 6
    assert seqs(pq.pop_front(10)) == [0, 2, 4]
    assert len(pq) == 0


def test_clear(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path)
    pq.push_back(entry(i) for i in range(5))
    pq.clear()
    assert len(pq) == 0
    assert pq.pop_front(5) == []
    pq.push_back([entry(9)])
    assert seqs(pq.pop_front(5)) == [9]


def test_pager_wipes_transient_pages_at_start(tmp_path: Path) -> None:
    pager = Pager(tmp_path / "paging")
    pager.queue("a/b c").push_back(entry(i) for i in range(3))
    handle = pager.spill.put(b"spilled")
    assert pager.queue("a/b c") is pager.queue("a/b c")
    assert pager.spill.get(handle) == b"spilled"
    again = Pager(tmp_path / "paging")
    assert len(again.queue("a/b c")) == 0
    assert len(again.spill) == 0
    again.queue("x").push_back([entry(1)])
    again.drop("x")
    assert len(again.queue("x")) == 0


def test_body_spill_refcounts_and_reclaims(tmp_path: Path) -> None:
    spill = BodySpill(tmp_path, segment_bytes=4096)
    handles = [spill.put(bytes([i]) * 1000) for i in range(20)]
    assert spill.files() > 3
    spill.retain(handles[0])
    for i, h in enumerate(handles):
        assert spill.get(h) == bytes([i]) * 1000
        spill.release(h)
    assert spill.get(handles[0]) == bytes(1000)  # still one reference
    spill.release(handles[0])
    with pytest.raises(KeyError):
        spill.get(handles[0])
    spill.reclaim()
    assert spill.files() <= 1
    with pytest.raises(KeyError):
        spill.retain(handles[1])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("back"), st.integers(1, 6)),
        st.tuples(st.just("spill"), st.integers(1, 30)),  # plain: PAGED_RUN records
        st.tuples(st.just("front"), st.integers(1, 4)),
        st.tuples(st.just("pop"), st.integers(1, 8)),
    ),
    max_size=40,
)


def spilled(seqs_: list[int]) -> list[tuple[int, Message, int | None]]:
    """Plain messages as the engine spills them; the exchange changes every 10 seqs (a run
    record ends there)."""
    return [
        (s, Message("" if (s // 10) % 2 else "x", "q", b"\x00\x00", f"m{s}".encode()), None)
        for s in seqs_
    ]


@settings(max_examples=40)
@given(ops=ops)
def test_order_matches_a_deque(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    """Random interleavings of page-out (back/front) and page-in keep deque order."""
    pq = PageQueue(tmp_path_factory.mktemp("pq"), run_bytes=256, read_bytes=128)
    model: deque[int] = deque()
    front_next = 999_999  # seq ids are unsigned: fronts count down from here
    back_next = 1_000_000
    for op, n in ops:
        if op == "back" or op == "spill":
            new = list(range(back_next, back_next + n))
            back_next += n
            if op == "back":
                pq.push_back(entry(s) for s in new)
            else:
                pq.push_back_spilled(spilled(new))
            model.extend(new)
        elif op == "front":
            new = list(range(front_next - n + 1, front_next + 1))
            front_next -= n
            pq.push_front([entry(s) for s in new])
            model.extendleft(reversed(new))
        else:
            got = seqs(pq.pop_front(n))
            want = [model.popleft() for _ in range(min(n, len(model)))]
            assert got == want
        assert len(pq) == len(model)
    assert seqs(pq.pop_front(10_000)) == list(model)


class _Copies:
    """Journal copies for a PageQueue under test: entries held by seq."""

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}

    def holds(self, seq: int) -> bool:
        return seq in self.entries

    def size(self, seq: int) -> int:
        return len(self.entries[seq].message.body)

    def read(self, seqs: Sequence[int]) -> list[Entry]:
        return [self.entries[s] for s in seqs]


def _journal_thirds(
    items: list[tuple[int, Message, int | None]], copies: _Copies
) -> list[tuple[int, Message, int | None]]:
    # every third message made persistent and given a journal copy (a PAGED_REF record)
    out = []
    for i, (s, m, x) in enumerate(items):
        if i % 3 == 0:
            m = replace(m, persistent=True)
            copies.entries[s] = Entry("", SeqId(s), m)
        out.append((s, m, x))
    return out


peek_ops = st.lists(
    st.one_of(
        st.tuples(st.just("back"), st.integers(1, 6), st.booleans()),  # True: journaled
        st.tuples(st.just("spill"), st.integers(1, 30), st.booleans()),  # runs, some journaled
        st.tuples(st.just("front"), st.integers(1, 4), st.booleans()),
        st.tuples(st.just("restore"), st.integers(1, 5), st.just(0)),
        st.tuples(st.just("pop"), st.integers(1, 8), st.just(0)),
        st.tuples(st.just("discard"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("peek"), st.integers(0, 60), st.integers(0, 12)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=peek_ops)
def test_peek_after_matches_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, Any]]
) -> None:
    """peek_after sees what pop_front would, from any cursor, and takes nothing."""
    copies = _Copies()
    pq = PageQueue(tmp_path_factory.mktemp("pq"), run_bytes=256, read_bytes=128, copies=copies)
    model: list[int] = []  # paged seqs, increasing
    front_next = 999_999
    back_next = 1_000_000

    def made(seqs_: list[int], journaled: bool) -> list[Entry]:
        # only persistent messages are journaled (and looked up in the journal)
        out = [entry(s) for s in seqs_]
        if journaled:
            out = [replace(e, message=replace(e.message, persistent=True)) for e in out]
            copies.entries.update((e.seq, e) for e in out)
        return out

    for op, n, x in ops:
        if op == "back" or op == "restore" or op == "spill":
            new = list(range(back_next, back_next + n))
            back_next += n
            if op == "back":
                pq.push_back(made(new, bool(x)))
            elif op == "spill":
                items = spilled(new)
                if x:  # every third persistent and journaled: PAGED_REF records between runs
                    items = _journal_thirds(items, copies)
                pq.push_back_spilled(items)
            else:
                made(new, True)
                pq.restore(new)
            model.extend(new)
        elif op == "front":
            new = list(range(front_next - n + 1, front_next + 1))
            front_next -= n
            pq.push_front(made(new, bool(x)))
            model[:0] = new
        elif op == "pop":
            assert seqs(pq.pop_front(n)) == model[:n]
            del model[:n]
        elif op == "discard" and model:
            seq = model.pop(n % len(model))
            pq.discard(seq, len(f"m{seq}"))
        elif op == "peek":
            after = None if not model or n == 0 else model[n % len(model)] - n % 2
            got = pq.peek_after(after, x)
            want = [s for s in model if after is None or s > after][:x]
            assert seqs(got) == want
            assert [m.body for _, m, _ in got] == [f"m{s}".encode() for s in want]
        assert len(pq) == len(model)
        assert seqs(pq.peek_after(None, 10_000)) == model  # a whole browse, any time
    assert seqs(pq.pop_front(10_000)) == model


def test_spilled_tuples_are_paged_as_entries_are(tmp_path: Path) -> None:
    # DiskSpillStore hands the engine's (seq, message, expires_at) to push_back_spilled: the
    # page files must be what push_back writes for the equivalent entries, byte for byte.
    def messages() -> list[tuple[int, Message, int | None]]:
        out: list[tuple[int, Message, int | None]] = []
        for i in range(40):
            m = Message(
                "ex" if i % 2 else "",
                f"rk{i}",
                b"\x00\x80\x02m%d" % i,
                b"b" * (i * 7),
                {"i": i} if i % 3 == 0 else None,
                i % 4,
                500 if i % 5 == 0 else None,
                i % 2 == 0,
                f"id{i}" if i % 6 else None,
                1_700_000_000_000 + i,
            )
            m.store_ref = i * 11
            out.append((i + 1, m, 9_000 + i if i % 4 == 0 else None))
        return out

    copies = _Copies()
    for seq, m, _ in messages()[::7]:  # some are live in the journal: PAGED_REF records
        copies.entries[seq] = Entry("", SeqId(seq), m)
    a = PageQueue(tmp_path / "a", run_bytes=700, read_bytes=300, copies=copies)
    b = PageQueue(tmp_path / "b", run_bytes=700, read_bytes=300, copies=copies)
    a.push_back(Entry("", SeqId(s), m, expiry_ms=x) for s, m, x in messages())
    b.push_back_spilled(messages())
    files_a = sorted((tmp_path / "a").iterdir())
    files_b = sorted((tmp_path / "b").iterdir())
    assert len(files_a) > 3
    assert [f.name for f in files_a] == [f.name for f in files_b]
    for fa, fb in zip(files_a, files_b, strict=True):
        assert fa.read_bytes() == fb.read_bytes()
    assert (a.refs_written, a.bytes_paged, len(a), a.body_bytes) == (
        b.refs_written,
        b.bytes_paged,
        len(b),
        b.body_bytes,
    )
    assert seqs(b.pop_front(100)) == list(range(1, 41))


def _rows(cols: Columns) -> list[tuple[Any, ...]]:
    return list(
        zip(
            cols.seqs,
            cols.redelivered,
            cols.timestamps,
            *(col.values() for col in cols.var_columns()),
            strict=True,
        )
    )


def _entry_row(item: tuple[int, Message, int | None]) -> tuple[Any, ...]:
    # the row the streams wire carries: AMQP 0-9-1 properties and body (another protocol's
    # form as its conversion)
    seq, m, _ = item
    props, body = amqp091_content(m)
    return (
        seq,
        0,
        m.timestamp_ms,
        m.exchange.encode(),
        m.routing_key.encode(),
        props,
        body,
    )


@settings(max_examples=60, deadline=None)
@given(ops=peek_ops)
def test_peek_columns_is_peek_after_without_the_expired(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, Any]]
) -> None:
    """peek_columns gives the rows of what peek_after gives, less the messages expired at
    now_ms, with every field as the record holds it (headers, message ids, forms, journal
    copies, memory runs, tombstones, run boundaries)."""
    copies = _Copies()
    pq = PageQueue(tmp_path_factory.mktemp("pq"), run_bytes=256, read_bytes=128, copies=copies)
    front_next = 999_999
    back_next = 1_000_000
    now = 100

    def made(seqs_: list[int], journaled: bool) -> list[Entry]:
        out = []
        for s in seqs_:
            amqp10 = s % 5 == 1  # another protocol's form: decoded, then converted
            data = f"m{s}".encode() * (s % 4)
            m = Message(
                "x-é" if s % 2 else "",
                f"rk{s % 5}",
                b"" if amqp10 else b"\x10\x00\x03id%d" % s,
                b"\x00Su\xa0" + bytes([len(data)]) + data if amqp10 else data,
                {"h": s} if s % 3 == 0 else None,
                message_id=f"id{s}" if s % 2 else None,
                timestamp_ms=s * 7,
                form=1 if amqp10 else 0,
            )
            if journaled:  # only persistent messages are journaled
                m = replace(m, persistent=True)
            out.append(Entry("", SeqId(s), m, expiry_ms=(now - 1 if s % 7 == 0 else now)))
        if journaled:
            copies.entries.update((e.seq, e) for e in out)
        return out

    def check(after: int | None, limit: int) -> None:
        want = [
            _entry_row(item)
            for item in pq.peek_after(after, 10_000)
            if item[2] is None or now <= item[2]
        ][:limit]
        cols = Columns()
        last = pq.peek_columns(after, limit, now, cols)
        while last is not None and len(cols) < limit:  # journal copies that expired
            last = pq.peek_columns(last, limit, now, cols)
        assert _rows(cols) == want

    for op, n, x in ops:
        if op == "back" or op == "restore" or op == "spill":
            new = list(range(back_next, back_next + n))
            back_next += n
            if op == "back":
                pq.push_back(made(new, bool(x)))
            elif op == "spill":  # one routing key, mostly plain: PAGED_RUN records
                items: list[tuple[int, Message, int | None]] = [
                    (
                        int(e.seq),
                        replace(
                            e.message,
                            routing_key="run",
                            headers=e.message.headers if e.seq % 7 == 0 else None,
                        ),
                        e.expiry_ms if e.seq % 9 == 0 else None,
                    )
                    for e in made(new, False)
                ]
                if x:
                    items = _journal_thirds(items, copies)
                pq.push_back_spilled(items)
            else:
                made(new, True)
                pq.restore(new)
        elif op == "front":
            new = list(range(front_next - n + 1, front_next + 1))
            front_next -= n
            pq.push_front(made(new, bool(x)))
        elif op == "pop":
            pq.pop_front(n)
        elif op == "discard" and len(pq):
            seq = seqs(pq.peek_after(None, 10_000))[n % len(pq)]
            pq.discard(seq, 0)
        elif op == "peek":
            paged = seqs(pq.peek_after(None, 10_000))
            after = None if not paged or n == 0 else paged[n % len(paged)] - n % 2
            check(after, x)
        check(None, 10_000)


def test_a_run_record_is_read_from_inside(tmp_path: Path) -> None:
    """Plain messages go to PAGED_RUN records; page-ins stop inside one (by count and by
    bytes) and go on from there; peeks, column peeks and tombstones see the rows a page-in
    has not taken yet."""
    pq = PageQueue(tmp_path, read_bytes=128)
    items = [
        (
            s,
            Message(
                "x",
                "q",
                b"\x00\x80\x02i%d" % s,
                b"b" * 10,
                message_id=f"i{s}",
                persistent=s % 2 == 0,
                priority=s % 3,
                timestamp_ms=s,
            ),
            None,
        )
        for s in range(1, 41)
    ]
    pq.push_back_spilled(items)
    assert (pq.runs_written, pq.pages_written, pq.body_bytes) == (1, 40, 400)
    got = pq.pop_front(7, max_bytes=35)  # bodies of 10: stops once 35 are reached
    assert seqs(got) == [1, 2, 3, 4]
    m = got[1][1]
    assert (m.exchange, m.routing_key, m.properties_bin, m.body) == (
        "x",
        "q",
        b"\x00\x80\x02i2",
        b"b" * 10,
    )
    assert (m.message_id, m.persistent, m.priority, m.timestamp_ms, m.headers) == (
        "i2",
        True,
        2,
        2,
        None,
    )
    pq.discard(5, 10)
    pq.discard(9, 10)
    assert seqs(pq.peek_after(None, 4)) == [6, 7, 8, 10]
    assert seqs(pq.peek_after(7, 2)) == [8, 10]
    cols = Columns()
    assert pq.peek_columns(6, 3, 0, cols) == 10  # filled up at seq 10
    assert list(cols.seqs) == [7, 8, 10]
    assert cols.properties == [b"\x00\x80\x02i7", b"\x00\x80\x02i8", b"\x00\x80\x02i10"]
    assert cols.routing_keys == [b"q"] * 3
    assert seqs(pq.pop_front(3)) == [6, 7, 8]
    assert (len(pq), pq.body_bytes) == (31, 310)
    assert seqs(pq.pop_front(100)) == list(range(10, 41))
    assert (len(pq), pq.body_bytes) == (0, 0)
