"""What a worker asks Redis about the leases it holds (the step loop between two steps; a worker giving jobs back):
one round trip each."""

from __future__ import annotations

from tasks.schemas import JobStatus, Progress
from tasks.store.job_scripts import HolderArgs, ReleaseArgs
from tasks.store.job_store import JobStore
from tasks.store.job_writes import pairs, status_of
from tasks.store.lua import ScriptCalls


def lease_states(store: JobStore, leases: list[tuple[str, str]]) -> list[tuple[JobStatus | None, bool]]:
    """Per ``(job id, token)``: the job's status, and whether the token still holds its lease.

    A canceled row reads ``canceled``; a row whose lease lapsed and passed to another worker reads ``running``
    under another token. Plain reads (HMGET), pipelined: no script, nothing written.
    """
    if not leases:
        return []
    with store.redis.pipeline(transaction=False) as pipe:
        for job_id, _ in leases:
            pipe.hmget(store.keys.job(job_id), "status", "lease_token")
        replies = pipe.execute()
    out: list[tuple[JobStatus | None, bool]] = []
    for (_, token), (status, holder) in zip(leases, replies, strict=True):
        out.append((status_of(status), holder is not None and holder.decode() == token))
    return out


def set_row_progress(store: JobStore, rows: list[tuple[str, str, int, int]]) -> None:
    """Each row's own progress ``(job id, token, step, total)``, written only where its lease is still held."""
    if not rows:
        return
    with store.redis.pipeline(transaction=False) as pipe:
        calls = ScriptCalls(pipe)
        for job_id, token, step, total in rows:
            fields = pairs({"progress": Progress(step=step, total=total)})
            calls.run(store.scripts, HolderArgs(job=store.keys.job(job_id), token=token, extend_s=0, fields=fields))
        calls.execute()


def release_leases(store: JobStore, leases: list[tuple[str, str]]) -> list[str]:
    """Give back the running jobs ``(job id, token)`` unended: queued again, their attempts uncounted; returns the ids
    released (a job that ended meanwhile, or that another run holds, is left as it is)."""
    if not leases:
        return []
    with store.redis.pipeline(transaction=False) as pipe:
        calls = ScriptCalls(pipe)
        for job_id, token in leases:
            calls.run(
                store.scripts, ReleaseArgs(job=store.keys.job(job_id), queued_prefix=store.keys.queued(""), token=token)
            )
        replies = calls.execute()
    return [job_id for (job_id, _), released in zip(leases, replies, strict=True) if released == 1]
