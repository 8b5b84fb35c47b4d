"""Every API process feeds OpenAI batches: a daemon thread that, every ``TICK_S``, takes the lease of each open
batch it can (tasks/store/openai_batch_store.py) and moves it on: its file validated (api/batch_validator.py), its
ended lines' answers collected, more lines submitted as jobs, and once it has stopped, its files written.

A batch keeps at most ``GENQ_BATCH_LINES_IN_FLIGHT`` lines queued or running, at low priority with a deadline at
its window's end: interactive jobs never queue behind more than that many of a batch's, and a worker left idle by
them runs the batch. Each line is one job whatever dies (``line_job_id`` names it before it is submitted; a line
registered and never submitted is submitted by whoever feeds next), and answered once (``settle``).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid

import redis
from flask import Flask, g

from api.batch_answers import answer_of, never_ran, refused
from api.batch_files import write_files
from api.batch_validator import Validations
from api.job_submit import submit
from api.keyring import KeyInfo
from api.services import Services
from tasks.errors import GenqError, InvalidInput, OutcomeUnknown, Unavailable
from tasks.input_checks import validate_input
from tasks.openai_batches import BatchRecord, BatchStatus, PreparedLine, batch_event, line_job_id
from tasks.schemas import JobCreate
from tasks.store.job_store import JobRecord

log = logging.getLogger(__name__)
TICK_S = 0.5


class BatchRunner:
    """The thread; ``stop`` ends it after its current pass."""

    def __init__(self, app: Flask) -> None:
        self.app, self.token = app, uuid.uuid4().hex
        self.validations = Validations(app, self.token, work_ttl_s(app.extensions["genq"]))
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="genq-batches", daemon=True)

    def start(self) -> BatchRunner:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        while not self.stopped.wait(TICK_S):
            try:
                self.run_once()
            except (redis.RedisError, OSError) as exc:
                log.warning("batch runner: Redis is unavailable (%s); trying again", exc)
            except Exception:
                log.exception("batch runner: a pass failed")

    def run_once(self) -> None:
        """One pass over the open batches (tests call it directly)."""
        with self.app.app_context():
            svc: Services = self.app.extensions["genq"]
            for batch_id in svc.openai_batches.open_ids():
                if svc.openai_batches.take_lease(batch_id, self.token):
                    Feeding(svc, batch_id, self.token, self.validations).advance()


class Feeding:
    """One pass over one batch whose lease this process holds."""

    def __init__(self, svc: Services, batch_id: str, token: str, validations: Validations) -> None:
        self.svc, self.id, self.token, self.validations = svc, batch_id, token, validations
        self.store = svc.openai_batches
        self.ttl_s = work_ttl_s(svc)

    def advance(self) -> None:
        batch = self.store.get(self.id)
        if batch is None:
            self.store.left_open(self.id)
            return
        if batch.status == BatchStatus.validating:
            self.validations.ensure(self.id)  # on a thread of its own; this pass renewed its lease
            return
        g.key_info = KeyInfo(owner=batch.owner, key_id=batch.key_id)  # whose jobs these are (api/job_submit.py)
        state = self.store.state(self.id)
        now = self.store.now()
        if batch.ending is None and (state.cancel or now >= batch.expires_at):
            ending = "cancelled" if state.cancel else "expired"
            status = BatchStatus.cancelling if state.cancel else batch.status
            batch = batch.model_copy(
                update={"ending": ending, "status": status, "cancelling_at": now if state.cancel else None}
            )
            if not self.store.save(batch, self.token):
                return
        flight = self.store.flight(self.id)
        missing, ended = self.collect(batch, flight)
        if batch.ending is not None:
            for job_id in flight:
                self.svc.store.cancel(job_id)
            prepared = self.store.lines_at(self.id, [line for _, line in missing])
            # Registered, never submitted: they never ran.
            answers = [
                (job_id, _json(never_ran(batch, line, p.custom_id)))
                for (job_id, line), p in zip(missing, prepared, strict=True)
            ]
            self.store.settle(self.id, self.token, answers, False, self.ttl_s)
        elif missing:
            self.submit_all(batch, missing, self.store.lines_at(self.id, [line for _, line in missing]))
        else:
            self.feed(batch, len(flight) - ended, state.fed)
        # Fed to the end (this pass fed nothing more then), or stopping: done once nothing is left in flight.
        if (batch.ending is not None or state.fed >= batch.total) and not self.store.flight(self.id):
            self.finish(batch, state.fed)

    def collect(self, batch: BatchRecord, flight: dict[str, int]) -> tuple[list[tuple[str, int]], int]:
        """Settle the lines whose jobs ended (how many); the lines in flight with no job (registered, never
        submitted)."""
        ids = list(flight)
        missing: list[tuple[str, int]] = []
        ended: list[tuple[str, int, JobRecord]] = []
        for job_id, job in zip(ids, self.svc.batches.get_many(ids), strict=True):
            if job is None:
                missing.append((job_id, flight[job_id]))
            elif job.status.terminal:
                ended.append((job_id, flight[job_id], job))
        prepared = self.store.lines_at(self.id, [line for _, line, _ in ended])
        answers: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
        for (job_id, line, job), p in zip(ended, prepared, strict=True):
            ok, answer = answer_of(self.svc.models, batch, line, p, job)
            answers[ok].append((job_id, _json(answer)))
        for ok in (True, False):
            self.store.settle(self.id, self.token, answers[ok], ok, self.ttl_s)
        return missing, len(ended)

    def feed(self, batch: BatchRecord, in_flight: int, fed: int) -> None:
        room = min(self.window(fed, in_flight) - in_flight, batch.total - fed)
        if room <= 0:
            return
        lines = self.store.lines(self.id, fed, room)
        jobs = [(line_job_id(self.id, fed + i), fed + i) for i in range(len(lines))]
        if not self.store.feed(self.id, self.token, jobs, fed + len(lines), self.ttl_s):
            return  # another process took the lease meanwhile
        self.submit_all(batch, jobs, lines)

    def window(self, fed: int, in_flight: int) -> int:
        """How many lines may be in flight: ``GENQ_BATCH_LINES_IN_FLIGHT``, and while other jobs of the next line's
        model are active (interactive calls, another batch), at most ``GENQ_BATCH_ROW_SHARE`` of its rows, so those
        jobs find free rows in its step sessions instead of queueing behind the batch's."""
        window = self.svc.settings.batch_lines_in_flight
        upcoming = self.store.lines(self.id, fed, 1)
        spec = self.svc.models.get(upcoming[0].model) if upcoming else None
        if spec is not None and self.svc.fleet.backlog(spec.id).backlog > in_flight:
            share = int(spec.batching.max_batch_size * self.svc.settings.batch_row_share)
            window = min(window, max(1, share))
        return window

    def submit_all(self, batch: BatchRecord, jobs: list[tuple[str, int]], lines: list[PreparedLine]) -> None:
        for (job_id, line), prepared in zip(jobs, lines, strict=True):
            try:
                self.submit(batch, job_id, prepared)
            except (Unavailable, OutcomeUnknown) as exc:  # left in flight without a job: a later pass submits it
                log.info("batch %s: line %d waits (%s)", self.id, line, exc)
                return
            except GenqError as exc:
                status = 400 if isinstance(exc, InvalidInput) else 404
                answer = refused(batch, line, prepared, status, str(exc), exc.code.value)
                self.store.settle(self.id, self.token, [(job_id, _json(answer))], False, self.ttl_s)

    def submit(self, batch: BatchRecord, job_id: str, prepared: PreparedLine) -> None:
        spec = self.svc.model(prepared.model)
        parsed = validate_input(spec.kind, prepared.input, spec.limits)
        left_s = max(1.0, batch.expires_at - self.store.now())
        body = JobCreate(model=spec.id, input=prepared.input, priority="low", deadline_s=left_s)
        submit(self.svc, spec, body, parsed, job_id, batch.owner)

    def finish(self, batch: BatchRecord, fed: int) -> None:
        """Write the files, then end the batch (completed, expired or cancelled)."""
        now = self.store.now()
        if batch.status != BatchStatus.finalizing:
            batch = batch.model_copy(update={"status": BatchStatus.finalizing, "finalizing_at": now})
            if not self.store.save(batch, self.token):
                return
        output, errors = write_files(self.svc, batch, fed)
        ending = batch.ending or "completed"
        status = BatchStatus(ending)
        stamp = {"completed": "completed_at", "expired": "expired_at", "cancelled": "cancelled_at"}[ending]
        ended = batch.model_copy(
            update={"status": status, stamp: now, "output_file_id": output, "error_file_id": errors, "ending": ending}
        )
        if self.store.save(ended, self.token):
            if ended.webhook:  # recorded once (set if absent); any worker's webhook sender delivers it
                self.svc.outbox.record([(self.id, batch_event(status))])
            self.store.drop_work(self.id)
            log.info("batch %s %s", self.id, status.value)


def work_ttl_s(svc: Services) -> int:
    """How long a batch's lines and answers are kept: past its window, for its files to be written."""
    return svc.settings.file_ttl_s + 2 * 86400


def _json(answer: dict[str, object]) -> str:
    return json.dumps(answer, separators=(",", ":"))


def start_batch_runner(app: Flask) -> BatchRunner:
    """Start the process's runner (the API's entry points do; tests drive ``run_once`` themselves)."""
    runner = BatchRunner(app).start()
    app.extensions["genq_batch_runner"] = runner
    return runner
