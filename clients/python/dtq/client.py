"""The dtq producer: enqueue tasks, read them back, cancel them.

It writes what the Go client (package client) writes: the same keys, the same
enqueue.lua and cancel.lua (the text Go runs, prelude joined, generated into dtq/lua/),
the same arguments, and it refuses the same bad input with the same messages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

import redis
from redis.exceptions import NoScriptError

from . import _go
from ._gostr import parse_int64, quote

__all__ = [
    "Client", "Task", "Result", "TaskInfo", "new_id", "decode_task",
    "DtqError", "InvalidTask", "PayloadTooBig", "NotFound", "WrongStatus", "TaskExists",
    "SCHEDULED", "QUEUED", "RUNNING", "RETRYING", "SUCCEEDED", "DEAD", "CANCELLED",
]

# Task statuses: the status field of a task's record.
SCHEDULED = "scheduled"
QUEUED = "queued"
RUNNING = "running"
RETRYING = "retrying"
SUCCEEDED = "succeeded"
DEAD = "dead"
CANCELLED = "cancelled"

# What cancel did (client.CancelDone, client.CancelRequested).
CANCEL_DONE = "cancelled"
CANCEL_REQUESTED = "requested"

Payload = Union[bytes, bytearray, memoryview, str]
Seconds = Union[int, float, timedelta]


class DtqError(Exception):
    """Every error this package raises of its own."""


class InvalidTask(DtqError, ValueError):
    """Input the Go client refuses too (client.ErrInvalid): "invalid task: ..."."""


class PayloadTooBig(DtqError, ValueError):
    """A payload over the client's limit (client.ErrPayloadTooBig)."""


class NotFound(DtqError, LookupError):
    """No such task (client.ErrNotFound)."""


class WrongStatus(DtqError):
    """The task is not in a state that allows this (client.ErrWrongStatus)."""


class TaskExists(DtqError):
    """A task with this id exists already (client.ErrTaskExists)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"enqueue {task_id}: a task with this id exists already")
        self.id = task_id


def _invalid(msg: str) -> InvalidTask:
    return InvalidTask("invalid task: " + msg)


_TRACEPARENT_WANT = "want 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"


def _hexpart(s: str, n: int) -> Optional[int]:
    """s as a number when it is n lower-case hex digits (W3C trace context), else None."""
    if len(s) != n or any(ch not in "0123456789abcdef" for ch in s):
        return None
    return int(s, 16)


def _ts_key_ok(key: str) -> bool:
    def rest(k: str) -> bool:
        return all(("a" <= ch <= "z") or ("0" <= ch <= "9") or ch in "_-*/" for ch in k)

    tenant, at, system = key.partition("@")
    if not at:
        return 1 <= len(key) <= 256 and "a" <= key[0] <= "z" and rest(key[1:])
    return (1 <= len(tenant) <= 241 and (("a" <= tenant[0] <= "z") or ("0" <= tenant[0] <= "9"))
            and rest(tenant[1:]) and 1 <= len(system) <= 14 and "a" <= system[0] <= "z" and rest(system[1:]))


def _ts_value_ok(val: str) -> bool:
    if not 1 <= len(val) <= 256:
        return False
    ok = all("\x20" <= ch <= "\x7e" and ch not in ",=" for ch in val)
    return ok and val[-1] != " "


def trace_context(traceparent: Optional[str], tracestate: Optional[str]) -> Tuple[bytes, bytes]:
    """The W3C trace context stored with the tasks of a call, written as the Go client
    writes a span context (OpenTelemetry's propagation.TraceContext: version 00, the
    sampled and random flags only, the tracestate's members re-joined); (b"", b"") when
    there is no traceparent. Raises InvalidTask for a malformed traceparent or tracestate,
    or a tracestate without a traceparent."""
    if not traceparent:
        if tracestate:
            raise _invalid("tracestate needs a traceparent")
        return b"", b""
    parts = traceparent.split("-", 3)
    if len(parts) != 4:
        raise _invalid(f"traceparent is not a valid W3C traceparent: {_TRACEPARENT_WANT}")
    flags_s, _, extra = parts[3].partition("-")
    ver, tid, sid, flags = (_hexpart(parts[0], 2), _hexpart(parts[1], 32),
                            _hexpart(parts[2], 16), _hexpart(flags_s, 2))
    if (ver is None or ver > 254 or not tid or not sid or flags is None
            or (ver == 0 and (flags > 3 or extra != ""))):
        raise _invalid(f"traceparent is not a valid W3C traceparent: {_TRACEPARENT_WANT}")
    # a later version may add fields after the flags; version 00 is what is written
    tp = f"00-{parts[1]}-{parts[2]}-{flags & 3:02x}"
    members: List[str] = []
    seen: set[str] = set()
    for m in (tracestate or "").split(","):
        if m == "":
            continue
        key, eq, val = m.partition("=")
        key, val = key.lstrip(" \t"), val.rstrip(" \t")
        if not eq or not _ts_key_ok(key) or not _ts_value_ok(val) or key in seen or len(members) == 32:
            raise _invalid("tracestate is not a valid W3C tracestate: want at most 32 key=value "
                           "pairs separated by commas, each key once")
        seen.add(key)
        members.append(key + "=" + val)
    return tp.encode(), ",".join(members).encode()


@dataclass
class Task:
    """A task to enqueue (client.Task).

    payload: bytes, or a str sent as UTF-8. priority: 0..9, 9 the most urgent. delay
    (seconds or a timedelta) or run_at (a datetime, naive meaning local time, or Unix
    seconds) schedule it for later; run_at wins when both are set. max_retries: failed
    attempts retried before the task is dead (None: the function's default). timeout
    bounds one attempt (None or 0: the function's default). unique: a second enqueue
    with the same key in the same queue creates nothing while the first task's record
    exists; reuse_unique passes a key held by a dead or cancelled task to this one.
    id: an explicit id ("" = generated, as new_id makes them).
    """

    queue: str
    function: str
    payload: Payload = b""
    priority: int = 0
    delay: Optional[Seconds] = None
    run_at: Optional[Union[datetime, int, float]] = None
    max_retries: Optional[int] = None
    timeout: Optional[Seconds] = None
    unique: str = ""
    reuse_unique: bool = False
    id: str = ""


@dataclass(frozen=True)
class Result:
    """The outcome of one enqueue (client.Result).

    created is False when a task holding the unique key exists: id is then that task's
    and holder_status its status (dead or cancelled: pass reuse_unique to replace it).
    error is set, for enqueue_many only, when this task was not enqueued (enqueue raises
    it instead).
    """

    id: str
    created: bool
    holder_status: str = ""
    error: Optional[Exception] = None


@dataclass(frozen=True)
class TaskInfo:
    """A task as stored (client.TaskInfo, decoded as client.DecodeTask does: a number
    that does not parse reads as 0). Text fields are decoded from UTF-8 with
    surrogateescape, so bytes that are not UTF-8 survive a round trip; payload and
    result are the stored bytes."""

    id: str
    queue: str
    function: str
    status: str
    attempt: int
    priority: int
    failures: int
    max_retries: int
    error: str
    result: bytes
    payload: bytes
    worker: str
    unique: str
    raw: str
    created_at_ms: int
    run_at_ms: int
    started_at_ms: int
    finished_at_ms: int
    reclaims: int


_ALPHABET = b"0123456789abcdefghjkmnpqrstvwxyz"
_RANDOM_CHARS = bytes(_ALPHABET[i & 31] for i in range(256))  # a random byte's low 5 bits


def new_id(now_ms: Optional[int] = None) -> str:
    """A task id as client.NewID makes it: 10 characters of millisecond time then 16
    random ones (Crockford base32, so ids sort by creation time)."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    b = bytearray(26)
    for i in range(9, -1, -1):
        b[i] = _ALPHABET[ms & 31]
        ms >>= 5
    b[10:] = secrets.token_bytes(16).translate(_RANDOM_CHARS)
    return b.decode("ascii")


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    return "" if v is None else str(v)


def _raw(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


_NAME_RES = {b"_.-": re.compile(rb"[A-Za-z0-9_.\-]*"), b"_.:-": re.compile(rb"[A-Za-z0-9_.:\-]*")}


def _name_chars(s: bytes, extra: bytes) -> bool:
    """keys.NameChars: only ASCII letters, digits and bytes of extra."""
    return _NAME_RES[extra].fullmatch(s) is not None


def _queue_problem(name: bytes) -> Optional[str]:
    """keys.ValidQueue."""
    if len(name) > 64:
        return f"queue name is {len(name)} bytes, more than 64"
    if not name or not _name_chars(name, b"_.-"):
        return f"queue name {quote(name)} must match [A-Za-z0-9_.-]{{1,64}}"
    return None


def _need_str(what: str, v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a str, not {type(v).__name__}")
    return v


def _need_int(what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, not {type(v).__name__}")
    return v


def _ms_of(what: str, v: Optional[Seconds]) -> int:
    """A duration in whole milliseconds, truncated as Go's Duration.Milliseconds."""
    if v is None:
        return 0
    if isinstance(v, timedelta):
        us = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    elif isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{what} must be seconds (int or float) or a timedelta, not {type(v).__name__}")
    elif isinstance(v, float) and not math.isfinite(v):
        raise _invalid(f"{what} must be a finite number of seconds")
    else:
        us = round(v * 1_000_000)
    return int(us / 1000) if us < 0 else us // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _unix_ms(v: Union[datetime, int, float]) -> int:
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.astimezone()
        return (v - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"run_at must be a datetime or Unix seconds, not {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise _invalid("run_at must be a finite number of seconds")
    return round(v * 1_000_000) // 1000  # microseconds first, as a timedelta would


class _Script:
    """One script of dtq/lua: run with EVALSHA, loaded (SCRIPT LOAD) when Redis says
    NOSCRIPT, then run again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.src = resources.files(__package__).joinpath("lua", name).read_bytes()
        self.sha = hashlib.sha1(self.src).hexdigest()

    def run(self, r: Any, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        try:
            return r.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.load(r)
            return r.evalsha(self.sha, len(keys), *keys, *args)

    def load(self, r: Any) -> None:
        r.script_load(self.src)


_ENQUEUE = _Script("enqueue.lua")
_CANCEL = _Script("cancel.lua")
_WAIT = _Script("wait.lua")


class _Keys:
    """internal/keys: the keys of one queue, all carrying the queue name as a hash tag."""

    def __init__(self, prefix: str, queue: str) -> None:
        self.name = queue
        self.base = _raw(prefix + ":{" + queue + "}:")

    def task(self, task_id: str) -> bytes:
        return self.base + b"t:" + _raw(task_id)

    def streams(self) -> List[bytes]:
        return [self.base + b"p%d" % p for p in range(_go.BANDS)]

    def unique(self, key: str) -> bytes:
        return self.base + b"u:" + _raw(key)

    def enqueue_keys(self) -> List[bytes]:
        b = self.base
        return [b + b"t:", b + b"p", b + b"schedule", b + b"u:", b + b"waiting", b + b"paused",
                b + b"in:", b + b"handed", b + b"limits"]


@dataclass
class _Checked:
    """A validated task: the fields of one task in enqueue.lua's arguments."""

    queue: str
    args: List[bytes]
    size: int


class Client:
    """A producer on one dtq deployment (one Redis, one key prefix), as client.New.

    r is a redis-py client (redis.Redis) that returns bytes (decode_responses False, the
    default). prefix is the key prefix ("" = dtq), max_payload the payload limit in
    bytes (0 = 1 MiB), result_ttl how long cancelled tasks are kept (0 = 24 h), now_ms
    the clock in Unix milliseconds (the system clock when None).
    """

    def __init__(self, r: "redis.Redis[bytes]", *, prefix: str = "", max_payload: int = 0,
                 result_ttl: Optional[Seconds] = None,
                 now_ms: Optional[Callable[[], int]] = None) -> None:
        if not hasattr(r, "evalsha") or not hasattr(r, "pipeline"):
            raise TypeError(f"r must be a redis-py client, not {type(r).__name__}")
        kw = getattr(getattr(r, "connection_pool", None), "connection_kwargs", {})
        if kw.get("decode_responses"):
            raise ValueError("r must return bytes: make it with decode_responses=False "
                             "(payloads and results are bytes)")
        self._r = r
        self._prefix = _need_str("prefix", prefix) or _go.DEFAULT_PREFIX
        mp = _need_int("max_payload", max_payload)
        self._max_payload = mp if mp > 0 else _go.DEFAULT_MAX_PAYLOAD
        keep = _ms_of("result_ttl", result_ttl)
        self._keep_ms = keep if keep > 0 else 24 * 3600 * 1000
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._known: dict[str, int] = {}

    # -- enqueue --------------------------------------------------------------

    def enqueue(self, queue: str, function: str, payload: Payload = b"", *, priority: int = 0,
                delay: Optional[Seconds] = None, run_at: Optional[Union[datetime, int, float]] = None,
                max_retries: Optional[int] = None, timeout: Optional[Seconds] = None,
                unique: str = "", reuse_unique: bool = False, id: str = "",
                traceparent: Optional[str] = None, tracestate: Optional[str] = None) -> Result:
        """Create a task (client.Enqueue). With a unique key that is taken it creates
        nothing and returns the holder's id with created False. traceparent and
        tracestate (W3C trace context, as OpenTelemetry's propagate.inject writes them)
        are stored with the task, and a traced worker runs it as a span of that trace.
        Raises InvalidTask, PayloadTooBig, TaskExists, DtqError (a script error), or
        redis-py's errors."""
        trace = trace_context(traceparent, tracestate)
        t = Task(queue=queue, function=function, payload=payload, priority=priority, delay=delay,
                 run_at=run_at, max_retries=max_retries, timeout=timeout, unique=unique,
                 reuse_unique=reuse_unique, id=id)
        now = self._now_ms()
        c = self._check(t, now)
        self._register(c.queue)
        keys, args = self._enqueue_call(c.queue, now, [c], trace)
        try:
            reply = _ENQUEUE.run(self._r, keys, args)
        except redis.ResponseError as e:
            raise DtqError(f"enqueue: {e}") from e
        res = _decode_enqueue(reply, 1)[0]
        if res.error is not None:
            raise res.error
        return res

    def enqueue_many(self, tasks: Iterable[Task], *, traceparent: Optional[str] = None,
                     tracestate: Optional[str] = None) -> List[Result]:
        """Create many tasks in one pipelined round trip (client.EnqueueMany): the tasks
        of one queue go in batches of at most 100 tasks or 1 MiB of payload, one script
        call each, created in order and each atomically. Results are in the order of
        tasks; a task refused or whose batch failed has its error in Result.error (the
        tasks before the failure in that batch may exist). traceparent and tracestate go
        with every task, as in enqueue; a malformed one raises InvalidTask and creates
        nothing."""
        trace = trace_context(traceparent, tracestate)
        ts = list(tasks)
        out: List[Optional[Result]] = [None] * len(ts)
        now = self._now_ms()

        class _Batch:
            def __init__(self, queue: str) -> None:
                self.queue = queue
                self.idx: List[int] = []
                self.tasks: List[_Checked] = []
                self.bytes = 0

        batches: List[_Batch] = []
        open_: dict[str, _Batch] = {}
        for i, t in enumerate(ts):
            if not isinstance(t, Task):
                raise TypeError(f"tasks[{i}] must be a dtq.Task, not {type(t).__name__}")
            try:
                c = self._check(t, now)
            except (InvalidTask, PayloadTooBig) as e:
                out[i] = Result(id="", created=False, error=e)
                continue
            self._register(c.queue)
            b = open_.get(c.queue)
            if b is None or len(b.tasks) == _go.ENQUEUE_BATCH or (
                    b.tasks and b.bytes + c.size > _go.ENQUEUE_BATCH_BYTES):
                b = _Batch(c.queue)
                open_[c.queue] = b
                batches.append(b)
            b.idx.append(i)
            b.tasks.append(c)
            b.bytes += c.size
        for attempt in range(2):
            if not batches:
                break
            p = self._r.pipeline(transaction=False)
            for b in batches:
                keys, args = self._enqueue_call(b.queue, now, b.tasks, trace)
                p.evalsha(_ENQUEUE.sha, len(keys), *keys, *args)
            replies = p.execute(raise_on_error=False)
            again: List[_Batch] = []
            for b, reply in zip(batches, replies):
                if isinstance(reply, NoScriptError) and attempt == 0:
                    again.append(b)
                    continue
                if isinstance(reply, Exception):
                    err: Exception = DtqError(f"enqueue: {reply}")
                    err.__cause__ = reply
                    for i in b.idx:
                        out[i] = Result(id="", created=False, error=err)
                    continue
                try:
                    rs = _decode_enqueue(reply, len(b.tasks))
                except DtqError as e:
                    rs = [Result(id="", created=False, error=e)] * len(b.tasks)
                for i, r in zip(b.idx, rs):
                    out[i] = r
            batches = again
            if batches:
                _ENQUEUE.load(self._r)
        return [r if r is not None else Result(id="", created=False) for r in out]

    def _check(self, t: Task, now: int) -> _Checked:
        """client.validate then client.args: the same checks in the same order."""
        queue = _need_str("queue", t.queue)
        function = _need_str("function", t.function)
        priority = _need_int("priority", t.priority)
        if isinstance(t.payload, str):
            payload = t.payload.encode("utf-8")
        elif isinstance(t.payload, (bytes, bytearray, memoryview)):
            payload = bytes(t.payload)
        else:
            raise TypeError(f"payload must be bytes or str, not {type(t.payload).__name__}")
        max_retries = None if t.max_retries is None else _need_int("max_retries", t.max_retries)
        timeout_ms = _ms_of("timeout", t.timeout)
        delay_ms = _ms_of("delay", t.delay)
        task_id = _need_str("id", t.id)
        unique = _need_str("unique", t.unique)
        if not isinstance(t.reuse_unique, bool):
            raise TypeError(f"reuse_unique must be a bool, not {type(t.reuse_unique).__name__}")
        run_at = None if t.run_at is None else _unix_ms(t.run_at)

        problem = _queue_problem(_raw(queue))
        if problem:
            raise _invalid(problem)
        fn = _raw(function)
        if not fn or len(fn) > 128:
            raise _invalid("function name must be 1..128 bytes")
        if priority < 0 or priority > _go.BANDS - 1:
            raise _invalid(f"priority {priority} out of range 0..{_go.BANDS - 1}")
        if len(payload) > self._max_payload:
            raise PayloadTooBig(f"payload over the limit: {len(payload)} bytes, limit {self._max_payload}")
        if max_retries is not None and (max_retries < 0 or max_retries > 1000):
            raise _invalid(f"max retries {max_retries} must be 0..1000")
        if timeout_ms < 0 or delay_ms < 0 or _negative(t.timeout) or _negative(t.delay):
            raise _invalid("timeout and delay must not be negative")
        rid = _raw(task_id)
        if rid and (len(rid) > 128 or not _name_chars(rid, b"_.:-")):
            raise _invalid(f"id {quote(rid)} must match [A-Za-z0-9_.:-]{{1,128}}")
        ukey = _raw(unique)
        if len(ukey) > 512:
            raise _invalid(f"unique key is {len(ukey)} bytes, limit 512")

        if not rid:
            rid = new_id(now).encode("ascii")
        at = 0
        if run_at is not None:
            at = run_at
        elif delay_ms > 0:
            at = now + delay_ms
        args = [rid, fn, payload, b"%d" % priority, b"%d" % (-1 if max_retries is None else max_retries),
                b"%d" % timeout_ms, b"%d" % at, ukey, b"1" if t.reuse_unique else b"0"]
        return _Checked(queue=queue, args=args, size=len(payload))

    def _enqueue_call(self, queue: str, now: int, tasks: Sequence[_Checked],
                      trace: Tuple[bytes, bytes] = (b"", b"")) -> Tuple[List[bytes], List[bytes]]:
        """The KEYS and ARGV of one enqueue.lua call (lua.Enqueue's enqueueKV): the trace
        context, when there is one, after the last task."""
        k = _Keys(self._prefix, queue)
        args = [_raw(queue), _go.GROUP.encode(), b"%d" % now]
        for c in tasks:
            args.extend(c.args)
        if trace[0]:
            args.extend(trace)
        return k.enqueue_keys(), args

    def _register(self, queue: str) -> None:
        """Add queue to the set of known queues, again every 10 s by this client's clock
        (client.register, client.RegisterEvery): the set heals when it is lost."""
        now = self._now_ms()
        with self._lock:
            last = self._known.get(queue)
        if last is not None and 0 <= now - last < _go.REGISTER_EVERY_MS:
            return
        self._r.sadd(_raw(self._prefix + ":queues"), _raw(queue))
        with self._lock:
            self._known[queue] = now

    # -- read and cancel ------------------------------------------------------

    def get(self, queue: str, id: str) -> TaskInfo:
        """Read a task (client.Get). Raises InvalidTask for a bad queue name, NotFound
        when there is no such task."""
        problem = _queue_problem(_raw(_need_str("queue", queue)))
        if problem:
            raise _invalid(problem)
        _need_str("id", id)
        h = self._r.hgetall(_Keys(self._prefix, queue).task(id))
        if not h:
            raise NotFound(f"get {id} in {queue}: no such task")
        ti = decode_task(h)
        if not ti.id or not ti.queue:
            ti = dataclasses.replace(ti, id=ti.id or id, queue=ti.queue or queue)
        return ti

    def cancel(self, queue: str, id: str) -> str:
        """Cancel a queued, scheduled or retrying task, or ask a running one to stop
        (client.CancelTask, cancel.lua). Returns "cancelled" (it was waiting; the record
        and its unique key are kept result_ttl) or "requested" (it was running: its
        worker stops it at its next heartbeat, and it ends cancelled unless it finished
        first). Raises InvalidTask, NotFound, WrongStatus (it has ended)."""
        problem = _queue_problem(_raw(_need_str("queue", queue)))
        if problem:
            raise _invalid(problem)
        _need_str("id", id)
        k = _Keys(self._prefix, queue)
        unique = self._r.hget(k.task(id), b"unique") or b""
        keys, args = self._cancel_call(queue, id, _text(unique), self._now_ms())
        try:
            reply = _CANCEL.run(self._r, keys, args)
        except redis.ResponseError as e:
            raise DtqError(f"cancel {id}: {e}") from e
        if not isinstance(reply, list) or len(reply) != 2:
            n = len(reply) if isinstance(reply, list) else 0
            raise DtqError(f"cancel {id}: unexpected reply of {n} values")
        code = reply[0] if isinstance(reply[0], int) else 0
        if code == 1:
            return CANCEL_DONE
        if code == 2:
            return CANCEL_REQUESTED
        if code == -1:
            raise NotFound(f"cancel {id}: no such task")
        raise WrongStatus(f"cancel {id} (status {_text(reply[1])}): task is not in a state that allows this")

    def wait(self, queue: str, id: str, timeout: Optional[Seconds] = None) -> TaskInfo:
        """Wait until the task ends (succeeded, dead or cancelled) and return its final
        record (client.Wait): woken by a push on the task's channel, not by polling. It
        subscribes first, then registers (wait.lua, the registration renewed every
        WAIT_RENEW_MS and ended on return; one left behind lapses after WAIT_LEASE_MS).
        A retry is not an end. timeout in seconds (None: no limit). Raises InvalidTask,
        NotFound, TimeoutError."""
        problem = _queue_problem(_raw(_need_str("queue", queue)))
        if problem:
            raise _invalid(problem)
        if not _need_str("id", id):
            raise _invalid("empty task id")
        limit = None if timeout is None else _ms_of("timeout", timeout) / 1000.0
        if limit is not None and limit < 0:
            raise _invalid(f"timeout {timeout} is negative")
        deadline = None if limit is None else time.monotonic() + limit
        k = _Keys(self._prefix, queue)
        keys = [k.base + b"waiters", k.task(id)]
        ps = self._r.pubsub(ignore_subscribe_messages=True)
        until = 0
        try:
            ps.subscribe(k.base + b"waiters:" + _raw(id))
            while True:
                now = self._now_ms()
                until = now + _go.WAIT_LEASE_MS
                status = _text(_WAIT.run(self._r, keys, [_raw(id), b"%d" % now, b"%d" % until, b"0"]))
                if status == "":
                    until = 0
                    raise NotFound(f"wait {id} in {queue}: no such task")
                if status in (SUCCEEDED, DEAD, CANCELLED):
                    until = 0
                    return self.get(queue, id)
                renew = time.monotonic() + _go.WAIT_RENEW_MS / 1000.0
                while True:
                    end = renew if deadline is None else min(renew, deadline)
                    left = end - time.monotonic()
                    if left <= 0:
                        if deadline is not None and time.monotonic() >= deadline:
                            raise TimeoutError(f"wait {id}: the task had not ended after {timeout}s")
                        break  # renew the registration
                    msg = ps.get_message(timeout=left)
                    if msg is None or msg.get("type") != "message":
                        continue
                    ti = self.get(queue, id)
                    if ti.status in (SUCCEEDED, DEAD, CANCELLED):
                        until = 0  # the ending script removed the registration
                        return ti
        finally:
            if until:
                try:
                    _WAIT.run(self._r, keys, [_raw(id), b"%d" % self._now_ms(), b"0", b"%d" % until])
                except redis.RedisError:
                    pass  # it lapses by itself
            ps.close()

    def _cancel_call(self, queue: str, task_id: str, unique: str, now: int) -> Tuple[List[bytes], List[bytes]]:
        """The KEYS and ARGV of one cancel.lua call (lua.Cancel's cancelKV)."""
        k = _Keys(self._prefix, queue)
        h = k.task(task_id)
        u = k.unique(unique) if unique else h
        keys = [h, k.base + b"schedule", *k.streams(), u, k.base + b"retrying", k.base + b"waiters"]
        return keys, [_go.GROUP.encode(), b"%d" % now, b"%d" % self._keep_ms, _raw(task_id)]


def _negative(v: Optional[Seconds]) -> bool:
    """A negative duration too short to show in whole milliseconds (Go refuses it too:
    it compares the Duration, not its milliseconds)."""
    if v is None:
        return False
    if isinstance(v, timedelta):
        return v < timedelta(0)
    return v < 0


def _decode_enqueue(reply: Any, n: int) -> List[Result]:
    """lua.Enqueue's decodeEnqueue."""
    if not isinstance(reply, list):
        raise DtqError(f"enqueue: unexpected reply of 0 values for {n} tasks")
    if len(reply) != 3 * n:
        raise DtqError(f"enqueue: unexpected reply of {len(reply)} values for {n} tasks")
    out = []
    for i in range(n):
        tid = _text(reply[3 * i])
        code = reply[3 * i + 1]
        if code == 1:
            out.append(Result(id=tid, created=True))
        elif code == 0:
            out.append(Result(id=tid, created=False, holder_status=_text(reply[3 * i + 2])))
        else:
            out.append(Result(id=tid, created=False, error=TaskExists(tid)))
    return out


def decode_task(h: "dict[bytes, bytes]") -> TaskInfo:
    """A task hash (HGETALL) decoded as client.DecodeTask does. It never fails: a field
    that does not parse reads as zero."""
    def s(k: bytes) -> str:
        return _text(h.get(k, b""))

    def n(k: bytes) -> int:
        return parse_int64(h.get(k))

    # The retries and the creation time from the record's spec, "TIMEOUT_MS MAX_RETRIES
    # CREATED_AT UNIQUE FUNCTION" (the enqueue keeps them there alone), or from fields of
    # their own where the record has them (written before, or an invalid-entry record).
    spec, nums = h.get(b"spec"), [0, 0, 0, 0]
    if spec is not None:
        for i in range(4):
            f, _, spec = spec.partition(b" ")
            nums[i] = parse_int64(f)
    max_retries = n(b"max_retries") if b"max_retries" in h else nums[1]
    created_at = n(b"created_at") if b"created_at" in h else nums[2]

    return TaskInfo(
        id=s(b"id"), queue=s(b"queue"), function=s(b"function"), status=s(b"status"),
        attempt=n(b"attempt"), priority=n(b"priority"), failures=n(b"failures"),
        max_retries=max_retries, error=s(b"error"), result=h.get(b"result", b""),
        payload=h.get(b"payload", b""), worker=s(b"worker"), unique=s(b"unique"), raw=s(b"raw"),
        created_at_ms=created_at, run_at_ms=n(b"run_at"), started_at_ms=n(b"started_at"),
        finished_at_ms=n(b"finished_at"), reclaims=n(b"reclaims"),
    )
