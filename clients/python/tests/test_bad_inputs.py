"""The shared bad-input table (testdata/bad_inputs.json), against the Python client:
the messages the Go client gives for the same input (clients/python/badinput_test.go
runs the table against it)."""

from __future__ import annotations

import json
import pathlib
from datetime import timedelta
from typing import Any, Dict, List

import pytest
import redis

import dtq

TABLE = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "bad_inputs.json"
CASES: List[Dict[str, Any]] = json.loads(TABLE.read_text(encoding="utf-8"))["cases"]
KINDS = {"invalid": dtq.InvalidTask, "payload_too_big": dtq.PayloadTooBig, "not_found": dtq.NotFound}


def text(v: Any) -> str:
    """A string of the table: as is, {"hex"} (raw bytes, as surrogate escapes) or
    {"repeat", "times"}."""
    if isinstance(v, str):
        return v
    if "hex" in v:
        return bytes.fromhex(v["hex"]).decode("utf-8", "surrogateescape")
    return str(v["repeat"]) * int(v["times"])


def task(c: Dict[str, Any]) -> dtq.Task:
    t = c["task"]
    return dtq.Task(
        queue=text(t["queue"]), function=text(t["function"]),
        payload=text(t.get("payload", "")).encode("utf-8", "surrogateescape"),
        priority=t.get("priority", 0), delay=timedelta(milliseconds=t.get("delay_ms", 0)),
        timeout=timedelta(milliseconds=t.get("timeout_ms", 0)), max_retries=t.get("max_retries"),
        unique=text(t.get("unique", "")), id=text(t.get("id", "")))


def check(c: Dict[str, Any], err: BaseException | None) -> None:
    if c["error"] is None:
        assert err is None, f"refused: {err}"
        return
    assert err is not None, f"accepted; want {c['error']!r}"
    assert str(err) == c["error"]
    assert isinstance(err, KINDS[c["kind"]])


def keys_under(rdb: "redis.Redis[bytes]", prefix: str) -> List[bytes]:
    return list(rdb.scan_iter(match=prefix + ":*", count=1000))


def test_table_is_substantial() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("c", CASES, ids=[c["name"] for c in CASES])
def test_bad_input(c: Dict[str, Any], rdb: "redis.Redis[bytes]", prefix: str) -> None:
    cl = dtq.Client(rdb, prefix=prefix, max_payload=c.get("client", {}).get("max_payload", 0))
    if c["op"] == "enqueue":
        t = task(c)
        err = None
        try:
            r = cl.enqueue(t.queue, t.function, t.payload, priority=t.priority, delay=t.delay,
                           timeout=t.timeout, max_retries=t.max_retries, unique=t.unique, id=t.id)
        except dtq.DtqError as e:
            err = e
        check(c, err)
        if c["error"] is None:
            assert r.created
            got = cl.get(t.queue, r.id)
            assert got.function == t.function and got.unique == t.unique
            return
        assert keys_under(rdb, prefix) == [], "a refused enqueue wrote keys"
        # In a batch the bad task gets the same error and its neighbours are created.
        good = dtq.Task(queue="q", function="f")
        rs = cl.enqueue_many([good, t, good])
        check(c, rs[1].error)
        assert rs[0].created and rs[2].created and not rs[1].created and rs[1].id == ""
    elif c["op"] == "get":
        with pytest.raises(dtq.DtqError) as ei:
            cl.get(text(c["queue"]), text(c["id"]))
        check(c, ei.value)
    elif c["op"] == "cancel":
        with pytest.raises(dtq.DtqError) as ei:
            cl.cancel(text(c["queue"]), text(c["id"]))
        check(c, ei.value)
    else:
        raise AssertionError(f"unknown op {c['op']!r}")
