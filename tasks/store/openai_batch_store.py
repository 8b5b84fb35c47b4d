"""OpenAI batches in Redis: the record, the prepared lines, the feeding state, the lines in flight and the answers
(tasks/openai_batches.py says what they are; api/batch_runner.py drives them).

Every write after a batch's creation is made by the holder of its lease (``batch_lease.lua``), fenced in the same
script, so two API processes never feed or settle one batch at once; a line is settled once (``batch_settle.lua``
removes it from the flight as it appends its answer). Every key of a batch lives as long as its record. Each write
that changes what its batch object shows publishes on the batch's channel (its event streams re-read it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from tasks.constants import Keys
from tasks.openai_batches import BatchRecord, PreparedLine
from tasks.store.lua_scripts import ScriptArgs, Scripts, key, pairs

LEASE_MS = 15_000  # a feeder that stops renewing for this long is taken over


@dataclass(frozen=True, kw_only=True)
class LeaseArgs(ScriptArgs):
    script = "batch_lease"
    lease: str = key()
    token: str
    ttl_ms: int


@dataclass(frozen=True, kw_only=True)
class LinesArgs(ScriptArgs):
    script = "batch_lines"
    lease: str = key()
    lines: str = key()
    token: str
    ttl_s: int
    entries: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class FeedArgs(ScriptArgs):
    script = "batch_feed"
    lease: str = key()
    flight: str = key()
    state: str = key()
    changed: str = key()
    token: str
    fed: int
    ttl_s: int
    entries: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class SettleArgs(ScriptArgs):
    script = "batch_settle"
    lease: str = key()
    flight: str = key()
    answers: str = key()
    state: str = key()
    changed: str = key()
    token: str
    counter: str
    ttl_s: int
    entries: list[str] = pairs()


@dataclass(frozen=True, kw_only=True)
class SaveArgs(ScriptArgs):
    script = "batch_save"
    lease: str = key()
    record: str = key()
    open: str = key()
    changed: str = key()
    token: str
    value: str
    final: str
    batch_id: str


@dataclass(frozen=True)
class BatchState:
    """How far a batch has got: lines fed, answered (completed, failed), in flight; whether a cancel was asked."""

    fed: int
    completed: int
    failed: int
    cancel: bool


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class BatchStore:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis, self.keys = client, keys
        self._scripts = Scripts(client)

    def now(self) -> float:
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    def part(self, batch_id: str, name: str) -> str:
        return self.keys.batch_part(batch_id, name)

    # -- creation (the API's create call) --
    def create(self, record: BatchRecord, ttl_s: int) -> None:
        """Write the record, index it under its owner and, if open, for the runners (which validate its file)."""
        index = self.keys.owner_batches(record.owner)
        with self.redis.pipeline() as pipe:
            pipe.set(self.keys.batch(record.id), record.model_dump_json(), ex=ttl_s)
            pipe.hset(self.part(record.id, "state"), mapping={"fed": 0, "completed": 0, "failed": 0})
            pipe.expire(self.part(record.id, "state"), ttl_s)
            pipe.zadd(index, {record.id: record.created_at})
            pipe.expire(index, ttl_s)
            if record.status.open:
                pipe.sadd(self.keys.open_batches(), record.id)
            pipe.execute()

    def drop_lines(self, batch_id: str) -> None:
        self.redis.delete(self.part(batch_id, "lines"))

    # -- reads --
    def get(self, batch_id: str) -> BatchRecord | None:
        raw = self.redis.get(self.keys.batch(batch_id))
        return None if raw is None else BatchRecord.model_validate_json(raw)

    def owned(self, owner: str) -> list[str]:
        """``owner``'s batch ids, newest first (ids whose record expired are pruned by the reader)."""
        ids: list[bytes | str] = self.redis.zrevrange(self.keys.owner_batches(owner or "-"), 0, -1)  # type: ignore[assignment]
        return [_text(i) for i in ids]

    def get_many(self, batch_ids: list[str]) -> list[BatchRecord | None]:
        if not batch_ids:
            return []
        raws = self.redis.mget([self.keys.batch(i) for i in batch_ids])
        return [None if raw is None else BatchRecord.model_validate_json(raw) for raw in raws]

    def forget(self, owner: str, batch_ids: list[str]) -> None:
        if batch_ids:
            self.redis.zrem(self.keys.owner_batches(owner or "-"), *batch_ids)

    def state(self, batch_id: str) -> BatchState:
        raw = {_text(k): _text(v) for k, v in self.redis.hgetall(self.part(batch_id, "state")).items()}
        return BatchState(
            fed=int(raw.get("fed", 0)),
            completed=int(raw.get("completed", 0)),
            failed=int(raw.get("failed", 0)),
            cancel=raw.get("cancel") == "1",
        )

    def open_ids(self) -> list[str]:
        return [_text(i) for i in self.redis.smembers(self.keys.open_batches())]

    def ask_cancel(self, batch_id: str) -> None:
        """The owner asked to cancel: the feeder sees it on its next pass (it alone writes the record)."""
        with self.redis.pipeline() as pipe:
            pipe.hset(self.part(batch_id, "state"), "cancel", 1)
            pipe.publish(self.keys.batch_channel(batch_id), "1")
            pipe.execute()

    # -- the feeder's (fenced by its lease) --
    def take_lease(self, batch_id: str, token: str) -> bool:
        return bool(self._scripts.run(LeaseArgs(lease=self.part(batch_id, "lease"), token=token, ttl_ms=LEASE_MS)))

    def add_lines(self, batch_id: str, token: str, lines: list[PreparedLine], ttl_s: int) -> bool:
        """Append validated lines (in pieces, as the input file is read); False once the lease is lost."""
        if not lines:
            return True
        name = self.part(batch_id, "lines")
        args = LinesArgs(
            lease=self.part(batch_id, "lease"),
            lines=name,
            token=token,
            ttl_s=ttl_s,
            entries=[line.model_dump_json() for line in lines],
        )
        return bool(self._scripts.run(args))

    def lines(self, batch_id: str, start: int, count: int) -> list[PreparedLine]:
        raws = self.redis.lrange(self.part(batch_id, "lines"), start, start + count - 1)
        return [PreparedLine.model_validate_json(raw) for raw in raws]

    def lines_at(self, batch_id: str, numbers: list[int]) -> list[PreparedLine]:
        """The prepared lines at ``numbers`` (in that order), in one round trip."""
        if not numbers:
            return []
        name = self.part(batch_id, "lines")
        with self.redis.pipeline(transaction=False) as pipe:
            for number in numbers:
                pipe.lindex(name, number)
            raws = pipe.execute()
        return [PreparedLine.model_validate_json(raw) for raw in raws]

    def flight(self, batch_id: str) -> dict[str, int]:
        """The lines in flight: job id -> line."""
        raw = self.redis.hgetall(self.part(batch_id, "flight"))
        return {_text(k): int(v) for k, v in raw.items()}

    def feed(self, batch_id: str, token: str, jobs: Iterable[tuple[str, int]], fed: int, ttl_s: int) -> bool:
        """Register ``jobs`` (job id, line) as in flight and the batch as fed up to line ``fed``."""
        entries = [str(part) for job in jobs for part in job]
        args = FeedArgs(
            lease=self.part(batch_id, "lease"),
            flight=self.part(batch_id, "flight"),
            state=self.part(batch_id, "state"),
            changed=self.keys.batch_channel(batch_id),
            token=token,
            fed=fed,
            ttl_s=ttl_s,
            entries=entries,
        )
        return bool(self._scripts.run(args))

    def settle(self, batch_id: str, token: str, answers: Iterable[tuple[str, str]], ok: bool, ttl_s: int) -> int:
        """The answers (job id, line) of lines in flight: output lines if ``ok``, else error lines, each once.
        How many were written (0 for lines settled already, or all when the lease was lost)."""
        entries = [part for answer in answers for part in answer]
        if not entries:
            return 0
        args = SettleArgs(
            lease=self.part(batch_id, "lease"),
            flight=self.part(batch_id, "flight"),
            answers=self.part(batch_id, "out" if ok else "err"),
            state=self.part(batch_id, "state"),
            changed=self.keys.batch_channel(batch_id),
            token=token,
            counter="completed" if ok else "failed",
            ttl_s=ttl_s,
            entries=entries,
        )
        return max(0, int(self._scripts.run(args)))

    def save(self, record: BatchRecord, token: str) -> bool:
        args = SaveArgs(
            lease=self.part(record.id, "lease"),
            record=self.keys.batch(record.id),
            open=self.keys.open_batches(),
            changed=self.keys.batch_channel(record.id),
            token=token,
            value=record.model_dump_json(),
            final="0" if record.status.open else "1",
            batch_id=record.id,
        )
        return bool(self._scripts.run(args))

    def answers(self, batch_id: str, ok: bool, start: int, count: int) -> list[bytes]:
        name = self.part(batch_id, "out" if ok else "err")
        return [r.encode() if isinstance(r, str) else r for r in self.redis.lrange(name, start, start + count - 1)]

    def drop_work(self, batch_id: str) -> None:
        """Once its files are written: the lines and answers go (the record and its counts stay)."""
        self.redis.delete(*[self.part(batch_id, name) for name in ("lines", "flight", "out", "err", "lease")])

    def left_open(self, batch_id: str) -> None:
        """A batch id whose record is gone (expired) leaves the open set."""
        self.redis.srem(self.keys.open_batches(), batch_id)
