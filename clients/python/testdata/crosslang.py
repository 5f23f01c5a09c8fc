"""The Python side of the cross-language tests (crosslang_test.go): reads a JSON
request on stdin, makes its calls with the dtq package, writes one JSON outcome per
call on stdout.

Request: {"port": N, "prefix": "...", "now_ms": N or null, "calls": [call, ...]} where a
call is {"op": "enqueue", "task": T}, {"op": "enqueue_many", "tasks": [T, ...]},
{"op": "get", "queue": Q, "id": ID} or {"op": "cancel", "queue": Q, "id": ID} (the two
enqueue calls may carry "traceparent" and "tracestate"); T has
queue, function, payload_hex, priority, delay_ms, run_at_ms, timeout_ms, max_retries,
unique, reuse_unique, id (all but queue and function optional). Bytes travel as hex.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List

import redis

import dtq


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, tz=timezone.utc) + timedelta(milliseconds=ms % 1000)


def task(t: Dict[str, Any]) -> dtq.Task:
    return dtq.Task(
        queue=t["queue"], function=t["function"], payload=bytes.fromhex(t.get("payload_hex", "")),
        priority=t.get("priority", 0),
        delay=timedelta(milliseconds=t["delay_ms"]) if "delay_ms" in t else None,
        run_at=at(t["run_at_ms"]) if "run_at_ms" in t else None,
        timeout=timedelta(milliseconds=t["timeout_ms"]) if "timeout_ms" in t else None,
        max_retries=t.get("max_retries"), unique=t.get("unique", ""),
        reuse_unique=t.get("reuse_unique", False), id=t.get("id", ""))


def result(r: dtq.Result) -> Dict[str, Any]:
    out: Dict[str, Any] = {"id": r.id, "created": r.created, "holder_status": r.holder_status}
    if r.error is not None:
        out.update(error=str(r.error), type=type(r.error).__name__)
    return out


def info(ti: dtq.TaskInfo) -> Dict[str, Any]:
    out = dict(ti.__dict__)
    out["payload_hex"] = out.pop("payload").hex()
    out["result_hex"] = out.pop("result").hex()
    return out


def main() -> None:
    req = json.load(sys.stdin)
    rdb = redis.Redis(port=req["port"])
    now: int = req.get("now_ms") or 0
    c = dtq.Client(rdb, prefix=req["prefix"], now_ms=(lambda: now) if now else None)
    out: List[Any] = []
    for call in req["calls"]:
        op = call["op"]
        try:
            if op == "enqueue":
                t = task(call["task"])
                r = c.enqueue(t.queue, t.function, t.payload, priority=t.priority, delay=t.delay,
                              run_at=t.run_at, max_retries=t.max_retries, timeout=t.timeout,
                              unique=t.unique, reuse_unique=t.reuse_unique, id=t.id,
                              traceparent=call.get("traceparent"), tracestate=call.get("tracestate"))
                out.append(result(r))
            elif op == "enqueue_many":
                rs = c.enqueue_many([task(t) for t in call["tasks"]], traceparent=call.get("traceparent"),
                                    tracestate=call.get("tracestate"))
                out.append([result(r) for r in rs])
            elif op == "get":
                out.append(info(c.get(call["queue"], call["id"])))
            elif op == "cancel":
                c.cancel(call["queue"], call["id"])
                out.append({})
            else:
                raise SystemExit(f"unknown op {op!r}")
        except dtq.DtqError as e:
            out.append({"error": str(e), "type": type(e).__name__})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
