"""enqueue_many throughput, for bench_test.go: N tasks in calls of BATCH tasks on the
Redis at PORT under PREFIX; prints the seconds the calls took."""

from __future__ import annotations

import sys
import time

import redis

import dtq


def main() -> None:
    port, prefix, n, batch = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = dtq.Client(redis.Redis(port=port), prefix=prefix)
    c.enqueue("warm", "noop")  # connects and loads the script outside the timing
    start = time.perf_counter()
    for i in range(0, n, batch):
        rs = c.enqueue_many([dtq.Task(queue="bench", function="noop", payload=b'{"n":1}')
                             for _ in range(min(batch, n - i))])
        bad = [r.error for r in rs if not r.created]
        if bad:
            raise SystemExit(f"enqueue_many: {bad[0]}")
    print(time.perf_counter() - start)


if __name__ == "__main__":
    main()
