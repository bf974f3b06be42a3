"""Scale-out: with `PLANNER_BROKER_URL` set, solves go through a Dramatiq queue on Redis
(redis://...) or RabbitMQ (amqp://...) to `planner worker` processes, on this machine or
others, and their answers come back through Dramatiq's Redis result backend: on the broker's
Redis, or with RabbitMQ on `PLANNER_RESULTS_URL` (redis://...; Dramatiq has no RabbitMQ result
backend, and the answers are keyed values read by one replica, which a key-value store keeps
and expires, not a queue). The marks of solves whose callers gave up live there too. Each worker runs a solve in its own SolverPool process
(api/worker.py), so the hard limits hold there as here: a solve past its run limit has its
process killed. The API replicas keep sharing plans through PostgreSQL; a plan row is written
by the API replica only once the answer is back, so a worker that dies mid-solve leaves no row
(the replica answers 503 when its wait ends).

Dramatiq over Celery and arq: Dramatiq acks a message only after its actor returns (a worker
killed mid-solve does not lose it: Redis requeues it to a live worker), it runs on Redis and
RabbitMQ alike, its result backend is built in, and it is small and typed; Celery's
acks_late and prefetch settings have to be got right to get the same, arq is asyncio-only
(a CPU-bound solve would block its loop) and Redis-only.

Messages and results are pickled (Dramatiq's PickleEncoder): a plan request and a Plan are
pydantic models, and the broker is the service's own, reached only by its replicas and
workers: never point PLANNER_BROKER_URL at a Redis that others can write."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import redis
from dramatiq.broker import Broker
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage, Middleware
from dramatiq.middleware import default_middleware as _default_middleware
from dramatiq.results import Results
from dramatiq.results.backends.redis import RedisBackend
from dramatiq.results.errors import ResultMissing, ResultTimeout

from .broker_urls import AMQP_SCHEMES, results_url_for, scheme
from .worker import Admission, QueueFull, SolverPool, SolveTimeout, Timing, answered, portable

QUEUE = "planner-solves"
# a solve whose caller gave up is marked here (message id -> 1, an hour): a worker that takes
# its message later skips it instead of solving for nobody
CANCELLED = "planner-cancelled:"
CANCELLED_TTL_S = 3600
RESULT_POLL_S = 0.1  # how often a replica asks for a solve's result
# a worker answers this long before its caller stops waiting: the result's way back (stored,
# then found by the caller's next poll)
RESULT_TRANSIT_S = 0.5


def default_middleware() -> list:
    return [m() for m in _default_middleware]


class WarmPool(Middleware):
    """In `planner worker`: its solve processes started when it boots, before it takes a
    message, so that no solve's run time (and run limit) is charged with their start."""

    def after_worker_boot(self, broker, worker) -> None:
        _worker_pool().warm()


# the Redis client of the result backend: the solves' answers and the cancel marks (configure)
_results: redis.Redis | None = None


def configure(url: str, results_url: str | None = None) -> Broker:
    """The broker of `url` (redis://host:port/db, or amqp://user:pw@host:port/vhost for
    RabbitMQ) and the result backend on Redis at `results_url` (default: the broker's own
    Redis; required with RabbitMQ), set as Dramatiq's. ValueError naming the setting at fault."""
    results_url = results_url_for(url, results_url)
    middleware = [*default_middleware(), CurrentMessage(), WarmPool()]
    if scheme(url) in AMQP_SCHEMES:
        # confirm_delivery: a send returns once RabbitMQ has the message (a replica that then
        # waits for its answer never waits for a message the broker lost)
        broker: Broker = RabbitmqBroker(url=url, middleware=middleware, confirm_delivery=True)
    else:
        broker = RedisBroker(url=url, middleware=middleware)
    global _results
    # the results' client without a socket timeout (BrokerPool._result polls it; a slow answer
    # from a loaded Redis is waited for, not cut at redis-py's default)
    _results = redis.Redis(connection_pool=redis.ConnectionPool.from_url(results_url, socket_timeout=None))
    broker.add_middleware(Results(backend=RedisBackend(client=_results, encoder=dramatiq.PickleEncoder())))
    dramatiq.set_broker(broker)
    dramatiq.set_encoder(dramatiq.PickleEncoder())
    return broker


if os.environ.get("PLANNER_BROKER_URL"):
    configure(os.environ["PLANNER_BROKER_URL"], os.environ.get("PLANNER_RESULTS_URL"))
else:  # importable without a broker (the actor is declared on a stub until one is configured)
    from dramatiq.brokers.stub import StubBroker
    from dramatiq.results.backends.stub import StubBackend

    dramatiq.set_broker(StubBroker(middleware=[*default_middleware(), Results(backend=StubBackend())]))

_local: SolverPool | None = None


def _worker_pool() -> SolverPool:
    """The worker's own process pool (one solve per Dramatiq thread at a time)."""
    global _local
    if _local is None:
        threads = int(os.environ.get("PLANNER_WORKER_THREADS", "1"))
        _local = SolverPool(threads, 0, max_tasks=int(os.environ.get("PLANNER_WORKER_MAX_TASKS", "1")))
    return _local


# max_retries 0: a solve that failed is answered as failed; a worker killed mid-solve leaves
# its message unacked, and the broker hands it to a live worker (a retry, not counted here)
# Dramatiq's own time limit (its TimeLimit middleware raises in the actor's thread) is not the
# one that stops a solve: the solve runs in a process of the worker's pool, which kills it
# (SolverPool.submit_timed); the actor's is a day, so that it never interrupts that wait.
@dramatiq.actor(queue_name=QUEUE, store_results=True, max_retries=0, time_limit=24 * 3600 * 1000)
def solve_job(fn: Callable[..., Any], args: tuple, run_limit_s: float,
              answer_by: float | None = None) -> tuple[bool, Any, float, float]:
    """In `planner worker`: fn(*args) in a worker process of this machine, killed past
    `run_limit_s` or at `answer_by` (wall clock: the request's arrival plus its limit plus
    KILL_AFTER_S, less the answer's way back), whichever comes first; not started past it:
    (ok, answer or exception, wall clock at start, run seconds)."""
    start = time.time()
    message = CurrentMessage.get_current_message()
    if message is not None and _results is not None and _results.exists(CANCELLED + message.message_id):
        return False, SolveTimeout(Timing(), False, "its caller gave up before a worker took it"), start, 0.0
    left_s = run_limit_s if answer_by is None else min(run_limit_s, answer_by - start)
    if left_s <= 0:
        return False, SolveTimeout(Timing(), False, "no time was left when a worker took it"), start, 0.0
    try:
        value, timing = asyncio.run(_worker_pool().submit_timed(fn, *args, timeout_s=left_s))
        return True, value, start + timing.queue_wait_s, timing.run_s
    except Exception as exc:  # noqa: BLE001 - every error goes back to the API replica
        return False, portable(exc), start, time.time() - start


class BrokerPool(Admission):
    """SolverPool's interface over the queue: admission (workers + queue_size per replica, then
    429), and each solve sent to the workers and waited for; `workers` is this replica's share
    of concurrent solves, not the workers' count (their queue is Redis's)."""

    def __init__(self, url: str, workers: int, queue_size: int, on_depth: Callable[[int], None] | None = None,
                 results_url: str | None = None):
        super().__init__(workers, queue_size, on_depth)
        self.broker = configure(url, results_url)
        self.results = _results
        if solve_job.broker is not self.broker:  # declared on another (the stub, at import): sent through this one
            solve_job.broker = self.broker
            self.broker.declare_actor(solve_job)
        self._in_flight = 0

    @property
    def busy(self) -> int:
        return min(self._in_flight, self.workers)

    @property
    def depth(self) -> int:
        """Solves sent and not yet started by a worker (the broker's queue length)."""
        with contextlib.suppress(Exception):
            if isinstance(self.broker, RabbitmqBroker):
                return int(self.broker.get_queue_message_counts(QUEUE)[0])
            return int(self.broker.client.llen(f"{self.broker.namespace}:{QUEUE}"))
        return 0

    @property
    def full(self) -> bool:
        return self._in_flight >= self.capacity

    async def submit_timed(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None,
                           run_limit_s: float | None = None) -> tuple[Any, Timing]:
        if self.full:
            raise QueueFull()
        self._in_flight += 1
        sent_wall, t0 = time.time(), time.perf_counter()
        wait_s = timeout_s if timeout_s is not None else 3600.0
        limit = run_limit_s if run_limit_s is not None else wait_s
        try:
            # the worker answers by the caller's deadline, less the answer's way back to here
            message = await asyncio.to_thread(solve_job.send, fn, args, limit, sent_wall + wait_s - RESULT_TRANSIT_S)
            try:
                ok, value, start_wall, run_s = await self._result(message, t0 + wait_s)
            except ResultTimeout:
                self._cancel(message)
                elapsed = time.perf_counter() - t0
                raise SolveTimeout(Timing(elapsed, 0.0), False,
                                   f"no worker answered within {timeout_s:g} s") from None
            except asyncio.CancelledError:
                self._cancel(message)  # the client went away
                raise
        finally:
            self._in_flight -= 1
        timing = Timing(max(0.0, start_wall - sent_wall), run_s)
        if not ok and isinstance(value, SolveTimeout):  # the worker's own kill: the queue wait is ours
            value.timing = Timing(timing.queue_wait_s, value.timing.run_s)
            raise value
        return answered(ok, value, timing), timing

    async def _result(self, message, deadline: float):
        """The message's result, asked for every RESULT_POLL_S until `deadline` (perf_counter):
        polled on the event loop rather than a blocking pop on a thread each, which the loop's
        few default threads would serialise (a burst's waits started late and ran long)."""
        while True:
            try:
                return await asyncio.to_thread(message.get_result, block=False)
            except ResultMissing:
                if time.perf_counter() >= deadline:
                    raise ResultTimeout("no result in time") from None
                await asyncio.sleep(RESULT_POLL_S)

    def _cancel(self, message) -> None:
        """Mark a message whose caller gave up, so no worker starts it later (one running
        finishes within its run limit: the broker cannot reach into another machine's process)."""
        with contextlib.suppress(Exception):
            self.results.set(CANCELLED + message.message_id, 1, ex=CANCELLED_TTL_S)

    def warm(self) -> None:
        self.results.ping()  # the broker and the result backend answer; the workers start on their own
        if isinstance(self.broker, RabbitmqBroker):
            self.broker.get_queue_message_counts(QUEUE)
        else:
            self.broker.client.ping()

    def worker_pids(self) -> list[int]:
        return []

    def shutdown(self) -> None:
        self.broker.close()
