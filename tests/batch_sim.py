"""A discrete-event simulation of one worker driving ``worker.batcher.Batcher`` on a fake clock.

It calls the batcher the way ``worker/consumer.py`` does: ``decide`` when the model goes idle, on
every arrival while idle, and when the timer it asked for fires; ``fetchable`` is true while a job
is in Redis (submitted, not yet delivered). Clients are closed loop (the next job leaves a return
delay after the last one ends) or open loop (Poisson).
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from worker.batcher import Batcher, Policy

TRANSIT_S = 0.002  # Redis to the worker's buffer


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Job:
    client: int
    submitted: float
    arrived: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    deadline: float | None = None


@dataclass
class Result:
    batches: list[int] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    waited_s: float = 0.0

    def mean_batch(self, skip: int = 0) -> float:
        return statistics.mean(self.batches[skip:])

    def latencies(self, skip: int = 0) -> list[float]:
        return [j.finished - j.submitted for j in self.jobs[skip:]]

    def idle_waits(self) -> list[float]:
        """Per job: time from arrival to start when it arrived to an idle model with nothing else buffered."""
        return [j.started - j.arrived for j in self.jobs]


class Sim:
    def __init__(
        self, policy: Policy, cost: Callable[[int], float], max_batch: int = 8, max_wait_s: float = 0.05
    ) -> None:
        self.clock = Clock()
        self.batcher: Batcher[Job] = Batcher(max_batch, max_wait_s, policy, clock=self.clock)
        self.cost = cost
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.busy = False
        self.running: list[Job] = []
        self.in_redis = 0
        self.timer_at: float | None = None
        self.result = Result()
        self.on_done: Callable[[Job], None] = lambda job: None

    def push(self, at: float, kind: str, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, self.seq, kind, payload))

    def submit(self, job: Job) -> None:
        self.push(job.submitted, "submit", job)

    def run(self, until: float) -> Result:
        while self.events and self.events[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self.events)
            self.clock.now = at
            if kind == "submit":  # in Redis now, in the worker's buffer after the transit
                self.in_redis += 1
                self.push(at + TRANSIT_S, "arrive", payload)
            elif kind == "arrive":
                assert isinstance(payload, Job)
                self.in_redis -= 1
                payload.arrived = at
                self.batcher.add(payload, key="k", deadline=payload.deadline)
                self.maybe_run()
            elif kind == "done":
                batch, self.running, self.busy = self.running, [], False
                self.batcher.batch_done(len(batch), self.cost(len(batch)))
                for job in batch:
                    job.finished = at
                    self.result.jobs.append(job)
                self.maybe_run()
                for job in batch:
                    self.on_done(job)
            elif kind == "timer" and payload == self.timer_at:
                self.timer_at = None
                self.maybe_run()
        self.result.waited_s = self.batcher.stats().waited_s
        return self.result

    def maybe_run(self) -> None:
        if self.busy or not len(self.batcher):
            return
        decision = self.batcher.decide(fetchable=self.in_redis > 0)
        if decision.batch:
            self.busy, self.running = True, decision.batch
            for job in decision.batch:
                job.started = self.clock.now
            self.result.batches.append(len(decision.batch))
            self.push(self.clock.now + self.cost(len(decision.batch)), "done")
        elif decision.wake_at is not None and decision.wake_at != self.timer_at:
            self.timer_at = decision.wake_at
            self.push(decision.wake_at, "timer", decision.wake_at)


def linear_cost(a: float, b: float) -> Callable[[int], float]:
    return lambda n: a + b * n


def closed_loop(
    sim: Sim, clients: int, return_s: float, jitter_s: float = 0.0, seed: int = 1, stagger_s: float = 0.0
) -> None:
    """``clients`` that each send their next job ``return_s`` (plus jitter) after the last one ends."""
    rng = random.Random(seed)

    def again(job: Job) -> None:
        sim.submit(Job(job.client, sim.clock.now + return_s + rng.uniform(0, jitter_s)))

    sim.on_done = again
    for c in range(clients):
        sim.submit(Job(c, sim.clock.now + c * stagger_s + rng.uniform(0, jitter_s)))


def poisson(sim: Sim, rate: float, seconds: float, seed: int = 1, deadline_s: float | None = None) -> None:
    rng = random.Random(seed)
    t = sim.clock.now
    while True:
        t += rng.expovariate(rate)
        if t > sim.clock.now + seconds:
            return
        sim.submit(Job(-1, t, deadline=None if deadline_s is None else t + deadline_s))
