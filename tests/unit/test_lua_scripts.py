"""Every Lua script loads into the real Redis and runs through its typed wrapper (tasks/store/lua_scripts.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis

from tasks.store import (
    byte_quota,
    fleet,
    idempotency,
    job_scripts,
    openai_batch_store,
    outbox,
    outbox_defer,
    queue_limit,
    uploads,
)
from tasks.store.lua_scripts import ScriptArgs, Scripts, key, pairs, read_lua, source
from tests.conftest import REDIS_URL

MODULES = (byte_quota, fleet, idempotency, job_scripts, openai_batch_store, outbox, outbox_defer, queue_limit, uploads)
STORE_DIR = Path(resources.files("tasks.store"))  # type: ignore[arg-type]


def wrappers() -> list[type[ScriptArgs]]:
    """Every wrapper that names a script of its own (JobFrame and ReserveArgs are parts of others)."""
    found = {
        obj
        for module in MODULES
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, ScriptArgs) and "script" in vars(obj)
    }
    return sorted(found, key=lambda cls: cls.script)


def includes(name: str) -> set[str]:
    """The preludes ``name``.lua includes, at any depth."""
    direct = set(re.findall(r"^--#include (\w+)", read_lua(name), re.MULTILINE))
    return direct.union(*(includes(d) for d in direct))


def test_every_lua_file_is_a_script_or_a_prelude_of_one():
    used = {cls.script for cls in wrappers()}
    used |= set().union(*(includes(name) for name in used))
    assert {p.stem for p in STORE_DIR.glob("*.lua")} == used


@pytest.mark.parametrize("path", sorted(STORE_DIR.glob("*.lua")), ids=lambda p: p.name)
def test_lua_reads_names_never_positions(path: Path):
    """KEYS and ARGV by position only in the loader's bindings (and the pairs' loops from ``<name>_from``)."""
    text = path.read_text()
    assert not re.search(r"KEYS\[\d|ARGV\[\d", text), f"{path.name} reads a position: name the field in its wrapper"


def test_the_loader_binds_fields_in_order_with_the_pairs_last():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Demo(ScriptArgs):
        script = "demo"
        a: str = key()
        x: int
        b: str = key()
        y: int
        rest: list[str] = pairs()

    call = Demo(a="ka", x=1, b="kb", y=2, rest=["f", "v"])
    assert call.keys() == ["ka", "kb"] and call.args() == [1, 2, "f", "v"]

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Bad(ScriptArgs):
        script = "bad"
        rest: list[str] = pairs()
        x: int

    with pytest.raises(TypeError, match="last field"):
        source(Bad)


@pytest.fixture
def client() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def job_frame(p: str) -> dict[str, Any]:
    return dict(
        job=p + "job:j1",
        done_channel=p + "done:j1",
        tombstone=p + "gone:j1",
        active_prefix=p + "active:",
        queued_prefix=p + "queued:",
        record_ttl=60,
        tombstone_ttl=120,
        events=p + "events:j1",
    )


def runs(client: redis.Redis, p: str) -> dict[str, Callable[[Scripts], None]]:
    """One run per script, through its wrapper, with what it must answer (keys under the prefix ``p``)."""

    def create(s: Scripts) -> None:
        created = s.run(
            job_scripts.CreateArgs(
                job=p + "job:j1",
                active=p + "active:m",
                tombstone=p + "gone:j1",
                id="j1",
                owner="alice",
                tombstone_ttl=60,
                deadline_offset="5",
                fields=["status", "queued", "model", "m", "id", "j1"],
            )
        )
        record = client.hgetall(p + "job:j1")
        assert float(record[b"deadline_at"]) == pytest.approx(float(created) + 5)

    def admit(s: Scripts) -> None:
        client.zadd(p + "workers:m", {"w1": float(client.time()[0])})
        reserve = queue_limit.ReserveArgs(
            queued=p + "queued:m", workers=p + "workers:m", id="j2", limit=1, worker_ttl=30, job_prefix=p + "job:"
        )
        create_args = job_scripts.CreateArgs(
            job=p + "job:j2",
            active=p + "active:m",
            tombstone=p + "gone:j2",
            id="j2",
            owner="alice",
            tombstone_ttl=60,
            deadline_offset="",
            fields=["status", "queued", "model", "m", "id", "j2"],
        )
        outcome, depth, created, queue = s.run(job_scripts.AdmitArgs.of(create_args, reserve))
        assert queue == b""  # no route asked: the caller's own queue
        assert (outcome, depth) == (1, 1) and float(created) > 0 and client.hget(p + "job:j2", "owner") is None
        full = job_scripts.AdmitArgs.of(
            dataclasses.replace(create_args, id="j3", job=p + "job:j3", tombstone=p + "gone:j3"),
            dataclasses.replace(reserve, id="j3"),
        )
        assert s.run(full)[:2] == [0, 1] and not client.exists(p + "job:j3")  # full: nothing written
        # Run again (a resend after a lost reply), even past its fence: the job's own place is not counted
        # against it and nothing is written twice.
        late = dataclasses.replace(reserve, not_after="1")
        again = s.run(job_scripts.AdmitArgs.of(create_args, late))
        assert again == [1, 1, created, b""] and client.zcard(p + "queued:m") == 1

    def admit_many(s: Scripts) -> None:
        client.zadd(p + "workers:b", {"w1": float(client.time()[0])})

        def job(n: int, need_worker: str = "1") -> job_scripts.AdmitManyJob:
            reserve = queue_limit.ReserveArgs(
                queued=p + "queued:b",
                workers=p + "workers:b",
                id=f"b{n}",
                limit=2,
                worker_ttl=30,
                job_prefix=p + "job:",
                need_worker=need_worker,
            )
            return job_scripts.AdmitManyJob(
                job=p + f"job:b{n}",
                active=p + "active:b",
                tombstone=p + f"gone:b{n}",
                reserve=reserve,
                owner="bob",
                deadline_offset="2" if n == 1 else "",
                fields_json=json.dumps({"status": "queued", "id": f"b{n}"}),
                route=route,
            )

        # A live pool worker holds b on the device with room for one: the first job is routed to it, the second
        # (its room taken by the first, whose message is not sent yet) to the shared queue.
        route = job_scripts.RouteArgs(
            residency=p + "residency:b", held_counts=p + "buffered:b", shared_queue="genq.b", queue_prefix="genq.w."
        )
        client.hset(route.residency, "w1", "device:1")

        replies = s.run(
            job_scripts.AdmitManyArgs(
                tombstone_ttl=60,
                worker_ttl=30,
                job_prefix=p + "job:",
                stale_after=60,
                prune_batch=10,
                queue_prefix="genq.w.",
                direct_prefix=p + "genq.w.",
                jobs=[job(1), job(2), job(3)],
            )
        )
        assert [r[:2] for r in replies] == [[1, 1], [1, 2], [0, 2]]  # a queue of 2: the third is refused
        assert [r[3] for r in replies] == [b"genq.w.w1", b"genq.b", b""]
        assert client.hget(p + "job:b2", "status") == b"queued" and not client.exists(p + "job:b3")
        assert float(client.hget(p + "job:b1", "deadline_at")) == pytest.approx(float(replies[0][2]) + 2)
        assert client.get(p + "gone:b1") == b"bob" and client.zscore(p + "active:b", "b2") is not None
        again = s.run(  # resent: the written jobs answer "reserved" as they were; the refused one is still refused
            job_scripts.AdmitManyArgs(
                tombstone_ttl=60,
                worker_ttl=30,
                job_prefix=p + "job:",
                stale_after=60,
                prune_batch=10,
                jobs=[job(1), job(2), job(3)],
            )
        )
        assert again == [[1, 2, replies[0][2], b"genq.b"], [1, 2, replies[1][2], b"genq.b"], [0, 2, b"", b""]]

    def route(s: Scripts) -> None:  # b's holder w1 (room for 2) and w2 (room for 1, one held): 2, then shared
        client.hset(p + "residency:b", mapping={"w1": "host:2", "w2": "device:2", "gone": "device:9"})
        client.hset(p + "buffered:b", "w2", 1)
        client.zadd(p + "workers:b", {"w2": float(client.time()[0])})  # "gone" has no heartbeat
        args = job_scripts.RouteManyArgs(
            residency=p + "residency:b",
            held_counts=p + "buffered:b",
            shared_queue="genq.b",
            queue_prefix="genq.w.",
            direct_prefix=p + "genq.w.",
            workers=p + "workers:b",
            worker_ttl=30,
            count=5,
        )
        assert s.run(args) == [b"genq.w.w2", b"genq.w.w1", b"genq.w.w1", b"genq.b", b"genq.b"]

    def claim(s: Scripts) -> None:
        before, attempts, verdict, _ = s.run(
            job_scripts.ClaimArgs(**job_frame(p), token="t", lease_s=30, worker="w1", deadline_error="{}")
        )
        assert (before, attempts, verdict) == (b"queued", 1, b"claimed")

    def holder(s: Scripts) -> None:
        ok = s.run(job_scripts.HolderArgs(job=p + "job:j1", token="t", extend_s=10, fields=["progress", "{}"]))
        lost = s.run(job_scripts.HolderArgs(job=p + "job:j1", token="other", extend_s=0))
        assert (ok, lost) == (1, -1) and client.hget(p + "job:j1", "progress") == b"{}"

    def release(s: Scripts) -> None:
        args = job_scripts.ReleaseArgs(job=p + "job:j1", queued_prefix=p + "queued:", token="t")
        assert s.run(dataclasses.replace(args, token="other")) == 0 and s.run(args) == 1
        assert client.hmget(p + "job:j1", "status", "attempts", "lease_token") == [b"queued", b"0", None]
        assert client.zscore(p + "queued:m", "j1") is not None  # its place in the queue is back
        claim(s)  # the next claim counts the attempt the release took back

    def finish(s: Scripts) -> None:
        args = job_scripts.FinishArgs(
            **job_frame(p),
            token="t",
            status="succeeded",
            counter_prefix=p + "done:",
            counter_bucket_s=10**9,
            counter_ttl=60,
            fields=["output", '"x"'],
        )
        assert (s.run(args), s.run(args)) == ([b"running", b"stored"], [b"succeeded", b"stored"])  # a retry: stored
        assert client.hget(p + "job:j1", "status") == b"succeeded" and client.get(p + "done:1") == b"1"  # counted once

    def end(s: Scripts) -> None:
        frame = {
            **job_frame(p),
            "job": p + "job:j2",
            "done_channel": p + "done:j2",
            "tombstone": p + "gone:j2",
            "events": p + "events:j2",
        }
        assert s.run(job_scripts.EndArgs(**frame, allowed=",queued,", status="canceled")) == b"queued"
        assert client.zcard(p + "queued:m") == 0  # its reservation went with it

    def record(s: Scripts) -> None:
        args = outbox.RecordArgs(delivery=p + "wh:j1:end", due=p + "due", delivery_id="msg_1", ttl=60, member="j1:end")
        assert (s.run(args), s.run(args)) == (1, 0)

    def outbox_claim(s: Scripts) -> None:
        reply = s.run(outbox.ClaimArgs(due=p + "due", lease_s=40.0, lease="L", delivery_prefix=p + "wh:", limit=5))
        assert reply == [b"j1:end", b"msg_1", 1]
        assert client.zscore(p + "due", "j1:end") == pytest.approx(float(client.time()[0]) + 40, abs=2)

    def settle(s: Scripts) -> None:
        args = outbox.SettleArgs(
            delivery=p + "wh:j1:end", due=p + "due", lease="L", member="j1:end", outcome="delivered", after_s=0.0
        )
        assert s.run(dataclasses.replace(args, lease="other")) == 0 and s.run(args) == 1
        assert client.hget(p + "wh:j1:end", "state") == b"delivered"

    def defer(s: Scripts) -> None:
        client.hset(p + "wh:j9:end", mapping={"lease": "L9", "attempts": 1})
        args = outbox_defer.DeferArgs(
            delivery=p + "wh:j9:end", due=p + "due9", lease="L9", member="j9:end", after_s=5.0
        )
        assert s.run(dataclasses.replace(args, lease="other")) == 0 and s.run(args) == 1
        assert client.hget(p + "wh:j9:end", "attempts") == b"0" and not client.hexists(p + "wh:j9:end", "lease")
        assert client.zscore(p + "due9", "j9:end") == pytest.approx(float(client.time()[0]) + 5, abs=2)

    def bind(s: Scripts) -> None:
        args = idempotency.BindArgs(binding=p + "idem", value="j1 digest", ttl=60)
        assert s.run(args) is None
        raw, age = s.run(args)
        assert raw.startswith(b"j1 digest ") and age >= 0

    def swap(s: Scripts) -> None:
        raw = client.get(p + "idem")
        assert s.run(idempotency.SwapArgs(binding=p + "idem", expected=b"else")) == 0
        assert s.run(idempotency.SwapArgs(binding=p + "idem", expected=raw)) == 1 and not client.exists(p + "idem")

    def beat(s: Scripts) -> None:
        s.run(fleet.BeatArgs(workers=p + "workers:m", held_counts=p + "held:m", worker="w1", held=3))
        assert client.hget(p + "held:m", "w1") == b"3" and client.zscore(p + "workers:m", "w1") is not None

    def quota(s: Scripts) -> None:
        args = byte_quota.ByteQuotaArgs(
            ledger=p + "bytes", sizes=p + "bytes:s", entry="u1", bytes=60, ttl_s=30, limit=100
        )
        assert s.run(args) == [1, 60]
        assert s.run(dataclasses.replace(args, entry="u2")) == [0, 60]  # past the limit: refused whole
        assert s.run(dataclasses.replace(args, entry="u2", bytes=40)) == [1, 100]
        assert s.run(dataclasses.replace(args, bytes=0)) == [1, 40]  # u1 given back
        assert s.run(dataclasses.replace(args, entry="u3", bytes=50, ttl_s=0.001)) == [1, 90]
        time.sleep(0.01)
        assert s.run(dataclasses.replace(args, entry="u4", bytes=1)) == [1, 41]  # u3 expired: its bytes went

    def upload_write(s: Scripts) -> None:
        args = uploads.UploadWriteArgs(
            meta=p + "upload:u1",
            tombstone=p + "upload-gone:u1",
            ledger=p + "up-bytes",
            sizes=p + "up-bytes:s",
            binding=p + "idem:k",
            value="{}",
            owner="alice",
            ttl_s=30,
            tombstone_ttl=60,
            entry="upload:u1",
            bytes=60,
            limit=100,
            not_after="",
            upload_prefix=p + "upload:",
            upload_id="u1",
            digest="d1",
        )
        assert s.run(dataclasses.replace(args, not_after="1")) == [b"late"]  # past its fence: nothing written
        assert not client.exists(p + "upload:u1", p + "idem:k", p + "up-bytes")
        assert s.run(args) == [b"ok", 60]
        assert client.get(p + "idem:k") == b"u1 d1" and client.ttl(p + "upload-gone:u1") > 60
        again = dataclasses.replace(args, meta=p + "upload:u2", upload_id="u2", entry="upload:u2")
        assert s.run(again) == [b"replay", b"u1"]  # the key names u1: nothing written, nothing counted
        assert s.run(dataclasses.replace(again, digest="d2")) == [b"conflict", b"u1"]
        assert s.run(dataclasses.replace(again, binding="")) == [b"over", 60]  # past the quota: refused whole
        assert not client.exists(p + "upload:u2")
        client.delete(p + "upload:u1")  # deleted (or expired): its binding names nothing, the key binds anew
        assert s.run(dataclasses.replace(again, bytes=40)) == [b"ok", 100]
        assert client.get(p + "idem:k") == b"u2 d1"

    def batch_runs() -> dict[str, Callable[[Scripts], None]]:
        """The batch feeder's five: lease, lines, feed, settle (once), save (a final record leaves the open set);
        each write publishes on the batch's channel."""
        b = openai_batch_store
        lease, flight, state, changed = p + "b:lease", p + "b:flight", p + "b:state", p + "b:changed"

        def take(s: Scripts) -> None:
            assert s.run(b.LeaseArgs(lease=lease, token="t1", ttl_ms=5000)) == 1
            assert s.run(b.LeaseArgs(lease=lease, token="t2", ttl_ms=5000)) == 0  # held by another
            assert s.run(b.LeaseArgs(lease=lease, token="t1", ttl_ms=5000)) == 1  # renewed

        def lines(s: Scripts) -> None:
            args = b.LinesArgs(lease=lease, lines=p + "b:lines", token="t1", ttl_s=60, entries=["a", "b"])
            assert s.run(dataclasses.replace(args, token="t2")) == 0 and not client.exists(p + "b:lines")
            assert s.run(args) == 1 and client.lrange(p + "b:lines", 0, -1) == [b"a", b"b"]

        def feed(s: Scripts) -> None:
            args = b.FeedArgs(
                lease=lease,
                flight=flight,
                state=state,
                changed=changed,
                token="t1",
                fed=2,
                ttl_s=60,
                entries=["j0", "0", "j1", "1"],
            )
            assert s.run(dataclasses.replace(args, token="t2")) == 0 and not client.exists(flight)
            assert s.run(args) == 1
            assert client.hgetall(flight) == {b"j0": b"0", b"j1": b"1"} and client.hget(state, "fed") == b"2"

        def settle(s: Scripts) -> None:
            args = b.SettleArgs(
                lease=lease,
                flight=flight,
                answers=p + "b:out",
                state=state,
                changed=changed,
                token="t1",
                counter="completed",
                ttl_s=60,
                entries=["j0", "{}", "j1", "{1}", "nobody", "{2}"],
            )
            with client.pubsub() as listener:
                listener.subscribe(changed)
                assert listener.get_message(timeout=1)["type"] == "subscribe"  # type: ignore[index]
                assert s.run(dataclasses.replace(args, token="t2")) == -1
                assert s.run(args) == 2 and s.run(args) == 0  # once each; a line not in flight is not written
                assert listener.get_message(timeout=1)["channel"] == changed.encode()  # type: ignore[index]
                assert listener.get_message(timeout=0.1) is None  # the second run wrote nothing: no news
            assert client.lrange(p + "b:out", 0, -1) == [b"{}", b"{1}"] and client.hget(state, "completed") == b"2"

        def save(s: Scripts) -> None:
            client.sadd(p + "b:open", "b1")
            args = b.SaveArgs(
                lease=lease,
                record=p + "b:rec",
                open=p + "b:open",
                changed=changed,
                token="t1",
                value="v",
                final="1",
                batch_id="b1",
            )
            assert s.run(dataclasses.replace(args, token="t2")) == 0 and not client.exists(p + "b:rec")
            assert s.run(args) == 1 and client.get(p + "b:rec") == b"v" and not client.sismember(p + "b:open", "b1")

        return {
            "batch_lease": take,
            "batch_lines": lines,
            "batch_feed": feed,
            "batch_settle": settle,
            "batch_save": save,
        }

    return {
        **batch_runs(),
        "upload_write": upload_write,
        "byte_quota": quota,
        "job_create": create,
        "job_admit": admit,
        "job_admit_many": admit_many,
        "job_route": route,
        "job_claim": claim,
        "job_holder": holder,
        "job_release": release,
        "job_finish": finish,
        "job_end": end,
        "outbox_record": record,
        "outbox_claim": outbox_claim,
        "outbox_settle": settle,
        "outbox_defer": defer,
        "idempotency_bind": bind,
        "idempotency_swap": swap,
        "fleet_beat": beat,
    }


def test_every_script_loads_and_runs_through_its_wrapper(client: redis.Redis, key_prefix: str):
    p = key_prefix + "lua-scripts:"
    scripts = Scripts(client)
    for cls in wrappers():  # SCRIPT LOAD: the composed source compiles
        assert client.script_load(source(cls)) == scripts.script(cls).sha
    checks = runs(client, p)
    assert sorted(checks) == sorted(cls.script for cls in wrappers()), "a script without a run here"
    for check in checks.values():  # in order: later runs use what earlier ones wrote
        check(scripts)
    assert json.loads(client.hget(p + "job:j1", "output") or b"null") == "x"


def test_the_lua_files_ship_with_the_package():
    import tomllib

    pyproject = tomllib.loads((STORE_DIR.parents[1] / "pyproject.toml").read_text())
    assert "*.lua" in pyproject["tool"]["setuptools"]["package-data"]["tasks.store"]
