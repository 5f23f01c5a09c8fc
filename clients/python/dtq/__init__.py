"""dtq: a Python producer for dtq, the Redis Streams task queue.

    import redis, dtq
    c = dtq.Client(redis.Redis())
    r = c.enqueue("emails", "send", b'{"to": "a@b.c"}', priority=9, max_retries=5,
                  timeout=30, unique="welcome:42")
    c.get("emails", r.id).status
"""

from .client import (
    CANCEL_DONE,
    CANCEL_REQUESTED,
    CANCELLED,
    DEAD,
    QUEUED,
    RETRYING,
    RUNNING,
    SCHEDULED,
    SUCCEEDED,
    Client,
    DtqError,
    InvalidTask,
    NotFound,
    PayloadTooBig,
    Result,
    Task,
    TaskExists,
    TaskInfo,
    WrongStatus,
    decode_task,
    new_id,
)

__all__ = [
    "Client", "Task", "Result", "TaskInfo", "new_id", "decode_task",
    "DtqError", "InvalidTask", "PayloadTooBig", "NotFound", "WrongStatus", "TaskExists",
    "SCHEDULED", "QUEUED", "RUNNING", "RETRYING", "SUCCEEDED", "DEAD", "CANCELLED",
    "CANCEL_DONE", "CANCEL_REQUESTED",
]
