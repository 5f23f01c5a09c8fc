"""The Python client against a real redis-server."""

from __future__ import annotations

import hashlib
import math
import pathlib
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Tuple, Union

import pytest
import redis

import dtq
from dtq import _go
from dtq.client import _CANCEL, _ENQUEUE, _name_chars, decode_task

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def rec(rdb: "redis.Redis[bytes]", prefix: str, queue: str, task_id: str) -> Dict[bytes, bytes]:
    return rdb.hgetall(f"{prefix}:{{{queue}}}:t:{task_id}".encode())


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def commandstats(rdb: "redis.Redis[bytes]") -> Dict[str, int]:
    """Calls per command since the server started."""
    info = rdb.info("commandstats")
    return {k[len("cmdstat_"):]: int(v["calls"]) for k, v in info.items()}


# -- the scripts -----------------------------------------------------------------

def test_shipped_scripts_hash_as_go_names_them() -> None:
    assert hashlib.sha1(_ENQUEUE.src).hexdigest() == _go.ENQUEUE_SHA1
    assert hashlib.sha1(_CANCEL.src).hexdigest() == _go.CANCEL_SHA1
    # enqueue.lua ships joined with the prelude functions it calls
    assert b"local function inbox_add_started(" in _ENQUEUE.src


def test_scripts_load_once_and_run_by_evalsha(fresh_server) -> None:  # type: ignore[no-untyped-def]
    rdb = redis.Redis(port=fresh_server.port)
    c = dtq.Client(rdb, prefix="p")
    for _ in range(3):
        c.enqueue("q", "f")
    st = commandstats(rdb)
    assert st.get("script|load") == 1
    assert "eval" not in st
    assert st["evalsha"] >= 3
    # a lost script cache (a restart) is loaded again, once
    rdb.script_flush()
    c.enqueue("q", "f")
    c.enqueue("q", "f")
    assert commandstats(rdb)["script|load"] == 2
    assert len(rdb.xrange("p:{q}:p0")) == 5
    rdb.close()


def test_enqueue_many_loads_missing_script(fresh_server) -> None:  # type: ignore[no-untyped-def]
    rdb = redis.Redis(port=fresh_server.port)
    c = dtq.Client(rdb, prefix="p")
    rs = c.enqueue_many([dtq.Task(queue="a", function="f"), dtq.Task(queue="b", function="f")])
    assert [r.created for r in rs] == [True, True] and all(r.error is None for r in rs)
    assert commandstats(rdb)["script|load"] == 1
    assert rdb.xlen("p:{a}:p0") == 1 and rdb.xlen("p:{b}:p0") == 1
    rdb.close()


# -- enqueue ---------------------------------------------------------------------

def test_enqueue_writes_the_record(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("mail", "send", b'{"to":"a@b.c"}', priority=7, max_retries=5,
                       timeout=timedelta(seconds=30), unique="welcome:1")
    assert r.created and r.error is None and r.holder_status == ""
    h = rec(rdb, prefix, "mail", r.id)
    assert h[b"status"] == b"queued" and h[b"priority"] == b"7" and h[b"function"] == b"send"
    assert h[b"payload"] == b'{"to":"a@b.c"}' and h[b"unique"] == b"welcome:1"
    # the timeout, retries and creation time are packed in spec alone
    assert h[b"spec"].split(b" ")[0:2] == [b"30000", b"5"] and h[b"spec"].endswith(b" 1 send")
    assert b"max_retries" not in h and b"timeout_ms" not in h and b"created_at" not in h
    ti = decode_task(h)
    assert ti.max_retries == 5 and ti.created_at_ms == int(h[b"spec"].split(b" ")[2]) > 0
    assert h[b"run_at"] == b"0" and h[b"queue"] == b"mail" and h[b"id"] == r.id.encode()
    entries = rdb.xrange(f"{prefix}:{{mail}}:p7")
    assert [e[1] for e in entries] == [{b"task": r.id.encode()}]  # attempt 0: no field
    assert h[b"entry"] == entries[0][0]
    assert rdb.get(f"{prefix}:{{mail}}:u:welcome:1") == r.id.encode()
    assert rdb.smembers(f"{prefix}:queues") == {b"mail"}
    groups = rdb.xinfo_groups(f"{prefix}:{{mail}}:p7")
    assert [g["name"] for g in groups] == [b"dtq"]


def test_defaults(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f")
    h = rec(rdb, prefix, "q", r.id)
    assert h[b"spec"].split(b" ")[:2] == [b"0", b"-1"] and h[b"payload"] == b""  # timeout, retries
    # a task due at once, without a unique key, leaves out the fields that would hold
    # their defaults: absent, handback and unique read as "", run_at as 0
    assert h[b"priority"] == b"0" and not {b"unique", b"handback", b"run_at"} & h.keys()
    ti = decode_task(h)
    assert ti.unique == "" and ti.run_at_ms == 0


def test_str_payload_is_utf8(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f", "é")
    assert rec(rdb, prefix, "q", r.id)[b"payload"] == "é".encode()


def test_durations_truncate_to_milliseconds(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    cases: List[Tuple[Union[int, float, timedelta], bytes]] = [
        (0.0015, b"1"), (timedelta(microseconds=999), b"0"), (2, b"2000"), (timedelta(milliseconds=1500), b"1500")]
    for given, want in cases:
        r = client.enqueue("q", "f", timeout=given)
        assert rec(rdb, prefix, "q", r.id)[b"spec"].split(b" ")[0] == want, given


def test_delay_and_run_at(rdb: "redis.Redis[bytes]", prefix: str) -> None:
    now = 1_700_000_000_000
    c = dtq.Client(rdb, prefix=prefix, now_ms=Clock(now))
    d = c.enqueue("q", "f", delay=1.5)
    h = rec(rdb, prefix, "q", d.id)
    assert h[b"status"] == b"scheduled" and h[b"run_at"] == str(now + 1500).encode()
    assert h[b"spec"].split(b" ")[2] == str(now).encode() and h[b"entry"] == b""
    assert rdb.zscore(f"{prefix}:{{q}}:schedule", d.id) == now + 1500
    # run_at wins over delay; a datetime, aware or naive (local time), or Unix seconds
    at = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    want = int(at.timestamp()) * 1000 + 678
    run_ats: List[Union[datetime, float]] = [at, at.astimezone().replace(tzinfo=None), at.timestamp(),
                                             1893553445.678]
    for run_at in run_ats:
        r = c.enqueue("q", "f", delay=10, run_at=run_at)
        assert rec(rdb, prefix, "q", r.id)[b"run_at"] == str(want).encode(), run_at
    # a time in the past runs now
    p = c.enqueue("q", "f", run_at=datetime(2001, 1, 1, tzinfo=timezone.utc))
    assert rec(rdb, prefix, "q", p.id)[b"status"] == b"queued"


@pytest.mark.parametrize("extra", [b"_.-", b"_.:-"])
def test_name_chars_every_byte(extra: bytes) -> None:
    for c in range(256):
        ok = 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c in extra
        assert _name_chars(bytes([c]), extra) == ok, c
        assert _name_chars(b"a" + bytes([c]) + b"b", extra) == ok, c
    assert not _name_chars(b"a\n", extra)


def test_new_id() -> None:
    ms = 1_700_000_000_123
    ids = {dtq.new_id(ms) for _ in range(100)}
    assert len(ids) == 100
    for i in ids:
        assert re.fullmatch(r"[0-9a-hjkmnp-tv-z]{26}", i), i
        n = 0
        for ch in i[:10]:
            n = n * 32 + ALPHABET.index(ch)
        assert n == ms
    assert dtq.new_id(ms) < dtq.new_id(ms + 1)


def test_generated_id_carries_creation_time(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f")
    n = 0
    for ch in r.id[:10]:
        n = n * 32 + ALPHABET.index(ch)
    assert str(n).encode() == rec(rdb, prefix, "q", r.id)[b"spec"].split(b" ")[2]


def test_explicit_id_taken(client: dtq.Client) -> None:
    client.enqueue("q", "f", id="order-1")
    with pytest.raises(dtq.TaskExists) as ei:
        client.enqueue("q", "f", id="order-1")
    assert str(ei.value) == "enqueue order-1: a task with this id exists already"
    assert ei.value.id == "order-1"
    rs = client.enqueue_many([dtq.Task(queue="q", function="f", id="order-1"),
                              dtq.Task(queue="q", function="f", id="order-2")])
    assert isinstance(rs[0].error, dtq.TaskExists) and not rs[0].created
    assert rs[1].created and rs[1].id == "order-2"


def test_unique(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    a = client.enqueue("q", "f", unique="k")
    b = client.enqueue("q", "f", unique="k")
    assert not b.created and b.id == a.id and b.holder_status == "queued"
    # the same key in another queue is another key
    assert client.enqueue("other", "f", unique="k").created
    # a cancelled holder passes its key on only when asked
    client.cancel("q", a.id)
    c = client.enqueue("q", "f", unique="k")
    assert not c.created and c.id == a.id and c.holder_status == "cancelled"
    d = client.enqueue("q", "f", unique="k", reuse_unique=True)
    assert d.created and d.id != a.id
    assert rec(rdb, prefix, "q", a.id)[b"unique"] == b""
    assert rdb.get(f"{prefix}:{{q}}:u:k") == d.id.encode()


# -- enqueue_many ----------------------------------------------------------------

def test_enqueue_many_orders_results_and_tasks(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    ts = [dtq.Task(queue="ab"[i % 2], function="f", payload=str(i).encode(), id=f"t{i}") for i in range(250)]
    rs = client.enqueue_many(ts)
    assert [r.id for r in rs] == [f"t{i}" for i in range(250)]
    assert all(r.created and r.error is None for r in rs)
    for q, first in (("a", 0), ("b", 1)):
        got = [e[1][b"task"].decode() for e in rdb.xrange(f"{prefix}:{{{q}}}:p0")]
        assert got == [f"t{i}" for i in range(first, 250, 2)]
    assert rdb.smembers(f"{prefix}:queues") == {b"a", b"b"}


def test_enqueue_many_batches(fresh_server) -> None:  # type: ignore[no-untyped-def]
    rdb = redis.Redis(port=fresh_server.port)
    c = dtq.Client(rdb, prefix="p")
    c.enqueue("warm", "f")  # loads the script
    before = commandstats(rdb)["evalsha"]
    c.enqueue_many([dtq.Task(queue="q", function="f") for _ in range(250)])
    assert commandstats(rdb)["evalsha"] - before == 3  # 100 + 100 + 50
    # by payload bytes: two tasks of 600 KB do not share a 1 MiB call
    big = b"x" * 600_000
    before = commandstats(rdb)["evalsha"]
    rs = c.enqueue_many([dtq.Task(queue="q", function="f", payload=big) for _ in range(3)])
    assert all(r.created for r in rs)
    assert commandstats(rdb)["evalsha"] - before == 3
    rdb.close()


def test_enqueue_many_failed_batch(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    rdb.set(f"{prefix}:{{broken}}:p0", "not a stream")
    rs = client.enqueue_many([dtq.Task(queue="broken", function="f", id="x1"),
                              dtq.Task(queue="fine", function="f", id="y1")])
    assert rs[0].error is not None and not rs[0].created
    assert str(rs[0].error).startswith("enqueue: WRONGTYPE"), rs[0].error
    assert isinstance(rs[0].error.__cause__, redis.ResponseError)
    assert rs[1].created and rs[1].error is None
    assert rec(rdb, prefix, "broken", "x1") == {}  # a failed enqueue creates nothing
    with pytest.raises(dtq.DtqError, match="^enqueue: WRONGTYPE"):
        client.enqueue("broken", "f")


def test_enqueue_many_empty(client: dtq.Client) -> None:
    assert client.enqueue_many([]) == []


# -- registration ----------------------------------------------------------------

def test_register_again_every_10s(rdb: "redis.Redis[bytes]", prefix: str) -> None:
    clock = Clock(1_000_000)
    c = dtq.Client(rdb, prefix=prefix, now_ms=clock)
    key = f"{prefix}:queues"
    c.enqueue("q", "f")
    assert rdb.smembers(key) == {b"q"}
    rdb.delete(key)  # the set is lost
    clock.ms += _go.REGISTER_EVERY_MS - 1
    c.enqueue("q", "f")
    assert rdb.smembers(key) == set()
    clock.ms += 1
    c.enqueue_many([dtq.Task(queue="q", function="f")])
    assert rdb.smembers(key) == {b"q"}
    rdb.delete(key)
    clock.ms -= 1  # a clock that went back registers again
    c.enqueue("q", "f")
    assert rdb.smembers(key) == {b"q"}


# -- get -------------------------------------------------------------------------

def test_get(rdb: "redis.Redis[bytes]", prefix: str) -> None:
    c = dtq.Client(rdb, prefix=prefix, now_ms=Clock(1_700_000_000_000))
    r = c.enqueue("q", "f", b"\xff\x00bin", priority=3, max_retries=2, delay=5, unique="u")
    ti = c.get("q", r.id)
    assert ti == dtq.TaskInfo(
        id=r.id, queue="q", function="f", status=dtq.SCHEDULED, attempt=0, priority=3, failures=0,
        max_retries=2, error="", result=b"", payload=b"\xff\x00bin", worker="", unique="u", raw="",
        created_at_ms=1_700_000_000_000, run_at_ms=1_700_000_005_000, started_at_ms=0,
        finished_at_ms=0, reclaims=0)


def test_get_fills_id_and_queue_of_a_bare_record(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    rdb.hset(f"{prefix}:{{q}}:t:bare", mapping={"status": "dead", "raw": "task=\xff"})
    ti = client.get("q", "bare")
    assert (ti.id, ti.queue, ti.status, ti.raw) == ("bare", "q", "dead", "task=\xff")


def test_get_missing(client: dtq.Client) -> None:
    with pytest.raises(dtq.NotFound, match=r"^get nope in q: no such task$"):
        client.get("q", "nope")


@pytest.mark.parametrize("text,want", [
    (b"12", 12), (b"+5", 5), (b"-7", -7), (b"007", 7), (b"", 0), (b" 5", 0), (b"5 ", 0), (b"1_0", 0),
    (b"1.5", 0), (b"0x10", 0), (b"+", 0), (b"9223372036854775807", 9223372036854775807),
    (b"9223372036854775808", 0), (b"-9223372036854775808", -9223372036854775808),
    (b"-9223372036854775809", 0), ("٣".encode(), 0),
])
def test_decode_numbers_as_go(text: bytes, want: int) -> None:
    assert decode_task({b"attempt": text}).attempt == want


@pytest.mark.parametrize("h,want", [
    ({b"spec": b"30000 5 1700000000000 1 send mail"}, (5, 1700000000000)),  # this release
    ({b"spec": b"0 -1 17 0 f", b"max_retries": b"2", b"created_at": b"9"}, (2, 9)),  # fields win
    ({b"max_retries": b"4", b"created_at": b"8"}, (4, 8)),  # before spec, invalid entries
    ({b"spec": b"1 x"}, (0, 0)), ({b"spec": b""}, (0, 0)), ({}, (0, 0)),
])
def test_decode_reads_spec_or_fields(h: "dict[bytes, bytes]", want: "tuple[int, int]") -> None:
    ti = decode_task(h)
    assert (ti.max_retries, ti.created_at_ms) == want


def test_decode_keeps_bytes_that_are_not_utf8() -> None:
    ti = decode_task({b"error": b"bad \xff", b"result": b"\xfe"})
    assert ti.error.encode("utf-8", "surrogateescape") == b"bad \xff"
    assert ti.result == b"\xfe"


# -- cancel ----------------------------------------------------------------------

def test_cancel_queued(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f", priority=4, unique="k")
    client.cancel("q", r.id)
    ti = client.get("q", r.id)
    assert ti.status == dtq.CANCELLED and ti.finished_at_ms > 0
    assert rdb.xlen(f"{prefix}:{{q}}:p4") == 0  # the undelivered entry is gone
    assert 0 < rdb.pttl(f"{prefix}:{{q}}:t:{r.id}") <= 24 * 3600 * 1000
    assert 0 < rdb.pttl(f"{prefix}:{{q}}:u:k") <= 24 * 3600 * 1000
    with pytest.raises(dtq.WrongStatus) as ei:
        client.cancel("q", r.id)
    assert str(ei.value) == f"cancel {r.id} (status cancelled): task is not in a state that allows this"


def test_cancel_scheduled_keeps_result_ttl(rdb: "redis.Redis[bytes]", prefix: str) -> None:
    c = dtq.Client(rdb, prefix=prefix, result_ttl=timedelta(minutes=1))
    r = c.enqueue("q", "f", delay=3600)
    c.cancel("q", r.id)
    assert rdb.zcard(f"{prefix}:{{q}}:schedule") == 0
    assert 0 < rdb.pttl(f"{prefix}:{{q}}:t:{r.id}") <= 60_000
    assert c.get("q", r.id).status == dtq.CANCELLED


def test_cancel_queued_says_cancelled(client: dtq.Client) -> None:
    r = client.enqueue("q", "f")
    assert client.cancel("q", r.id) == dtq.CANCEL_DONE == "cancelled"


def test_cancel_running_requests_a_stop(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f")
    key = f"{prefix}:{{q}}:t:{r.id}"
    rdb.hset(key, mapping={"status": "running", "attempt": "1"})  # as a worker's claim leaves it
    assert client.cancel("q", r.id) == dtq.CANCEL_REQUESTED == "requested"
    assert rdb.hget(key, "status") == b"running"  # the worker ends it, not the request
    first = rdb.hget(key, "cancel")
    assert first is not None and int(first) > 0
    assert client.cancel("q", r.id) == dtq.CANCEL_REQUESTED
    assert rdb.hget(key, "cancel") == first


def _registered(rdb: "redis.Redis[bytes]", prefix: str, id: str) -> None:
    deadline = time.monotonic() + 30
    while rdb.zscore(f"{prefix}:{{q}}:waiters", id) is None:
        assert time.monotonic() < deadline, "the waiter never registered"
        time.sleep(0.001)


def test_wait_is_woken_by_the_end(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f", delay=3600)
    got: List[object] = []
    th = threading.Thread(target=lambda: got.append(client.wait("q", r.id, timeout=30)))
    th.start()
    _registered(rdb, prefix, r.id)
    assert client.cancel("q", r.id) == dtq.CANCEL_DONE
    th.join(30)
    assert len(got) == 1 and isinstance(got[0], dtq.TaskInfo) and got[0].status == dtq.CANCELLED
    assert rdb.exists(f"{prefix}:{{q}}:waiters") == 0  # nothing left behind
    # an ended task returns at once
    assert client.wait("q", r.id).status == dtq.CANCELLED


def test_wait_timeout_and_errors(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f", delay=3600)
    with pytest.raises(TimeoutError, match="had not ended"):
        client.wait("q", r.id, timeout=0.2)
    assert rdb.exists(f"{prefix}:{{q}}:waiters") == 0  # the registration ended with the wait
    with pytest.raises(dtq.NotFound, match=r"^wait nope in q: no such task$"):
        client.wait("q", "nope")
    with pytest.raises(dtq.InvalidTask):
        client.wait("a{b", r.id)
    with pytest.raises(dtq.InvalidTask):
        client.wait("q", "")
    with pytest.raises(dtq.InvalidTask):
        client.wait("q", r.id, timeout=-1)


def test_cancel_missing(client: dtq.Client) -> None:
    with pytest.raises(dtq.NotFound, match=r"^cancel nope: no such task$"):
        client.cancel("q", "nope")


# -- input the Go client cannot be given -------------------------------------------

@pytest.mark.parametrize("kwargs,err", [
    ({"queue": 1}, TypeError), ({"function": None}, TypeError), ({"payload": 5}, TypeError),
    ({"payload": ["x"]}, TypeError), ({"priority": True}, TypeError), ({"priority": 1.0}, TypeError),
    ({"max_retries": "3"}, TypeError), ({"delay": "5"}, TypeError), ({"timeout": True}, TypeError),
    ({"run_at": "2030-01-01"}, TypeError), ({"unique": b"k"}, TypeError), ({"id": 7}, TypeError),
    ({"reuse_unique": 1}, TypeError), ({"delay": math.nan}, dtq.InvalidTask),
    ({"timeout": math.inf}, dtq.InvalidTask), ({"run_at": math.nan}, dtq.InvalidTask),
    ({"delay": -0.0001}, dtq.InvalidTask), ({"timeout": timedelta(microseconds=-1)}, dtq.InvalidTask),
])
def test_python_only_bad_input(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str,
                               kwargs: Dict[str, object], err: type) -> None:
    args: Dict[str, object] = {"queue": "q", "function": "f"}
    args.update(kwargs)
    with pytest.raises(err):
        client.enqueue(**args)  # type: ignore[arg-type]
    t = dtq.Task(**args)  # type: ignore[arg-type]
    if err is TypeError:
        with pytest.raises(TypeError):
            client.enqueue_many([t])
    else:
        assert isinstance(client.enqueue_many([t])[0].error, err)
    assert list(rdb.scan_iter(match=prefix + ":*")) == []


def test_client_refuses_decoded_responses(server) -> None:  # type: ignore[no-untyped-def]
    r = redis.Redis(port=server.port, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses=False"):
        dtq.Client(r)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        dtq.Client("redis://localhost")  # type: ignore[arg-type]


def test_enqueue_many_refuses_what_is_not_a_task(client: dtq.Client) -> None:
    with pytest.raises(TypeError, match=r"tasks\[1\]"):
        client.enqueue_many([dtq.Task(queue="q", function="f"), {"queue": "q"}])  # type: ignore[list-item]


def test_default_prefix(rdb: "redis.Redis[bytes]") -> None:
    c = dtq.Client(rdb)
    r = c.enqueue("pytest-default-prefix", "f")
    try:
        assert rdb.exists(f"dtq:{{pytest-default-prefix}}:t:{r.id}") == 1
    finally:
        keys: List[bytes] = list(rdb.scan_iter(match="dtq:{pytest-default-prefix}:*"))
        rdb.delete(*keys)
        rdb.srem("dtq:queues", "pytest-default-prefix")


def test_readme_example(server) -> None:  # type: ignore[no-untyped-def]
    """The README's example runs as written (on the test's server, its own prefix)."""
    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code is not None
    src = code.group(1).replace('redis.Redis.from_url("redis://127.0.0.1:6379/0"))',
                                f'redis.Redis(port={server.port}), prefix="readme")')
    assert "prefix=\"readme\"" in src
    env: Dict[str, object] = {}
    exec(compile(src, "README.md", "exec"), env)  # noqa: S102 - the project's own README
    rs = env["rs"]
    assert isinstance(rs, list) and len(rs) == 2 and all(x.created for x in rs)
    got = env["c"].get("emails", env["r"].id)  # type: ignore[attr-defined]
    assert got.status == dtq.CANCELLED and got.unique == "welcome:42"


# -- trace context ----------------------------------------------------------------

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_trace_context_stored_with_every_task(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str) -> None:
    r = client.enqueue("q", "f", traceparent=TP, tracestate="rojo=00f067aa0ba902b7")
    rs = client.enqueue_many([dtq.Task(queue="q", function="f"), dtq.Task(queue="p", function="f")],
                             traceparent=TP)
    for q, id, ts in [("q", r.id, b"rojo=00f067aa0ba902b7"), ("q", rs[0].id, None), ("p", rs[1].id, None)]:
        h = rdb.hgetall(f"{prefix}:{{{q}}}:t:{id}")
        assert h[b"traceparent"] == TP.encode()
        assert h.get(b"tracestate") == ts
    plain = client.enqueue("q", "f")
    assert b"traceparent" not in rdb.hgetall(f"{prefix}:{{q}}:t:{plain.id}")


@pytest.mark.parametrize("tp,ts,msg", [
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", None, "traceparent is not a valid W3C traceparent"),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", None, "traceparent is not a valid W3C traceparent"),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None, "traceparent is not a valid W3C traceparent"),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None, "traceparent is not a valid W3C traceparent"),
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None, "traceparent is not a valid W3C traceparent"),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04", None, "traceparent is not a valid W3C traceparent"),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", None, "traceparent is not a valid W3C traceparent"),
    ("garbage", None, "traceparent is not a valid W3C traceparent"),
    (TP, "Rojo=1", "tracestate is not a valid W3C tracestate"),
    (TP, "rojo=1,rojo=2", "tracestate is not a valid W3C tracestate"),
    (TP, "rojo", "tracestate is not a valid W3C tracestate"),
    (TP, "rojo=a,b", "tracestate is not a valid W3C tracestate"),
    (TP, ",".join(f"k{i}=v" for i in range(33)), "tracestate is not a valid W3C tracestate"),
    (None, "rojo=1", "tracestate needs a traceparent"),
])
def test_bad_trace_context_refused_nothing_written(client: dtq.Client, rdb: "redis.Redis[bytes]", prefix: str,
                                                   tp: str, ts: str, msg: str) -> None:
    with pytest.raises(dtq.InvalidTask, match=msg):
        client.enqueue("q", "f", traceparent=tp, tracestate=ts)
    with pytest.raises(dtq.InvalidTask, match=msg):
        client.enqueue_many([dtq.Task(queue="q", function="f")], traceparent=tp, tracestate=ts)
    assert rdb.keys(prefix + "*") == []
