"""Cleaning rounds that run outside the worker: the Spark ``compact`` job on a served volume.

The worker never stops serving, and it stays the only process that swaps segments of its logs.
A job (see :mod:`storagepipeline.online_compact`) goes through three admin calls:

1. **begin** (:meth:`ExternalRounds.begin`): for each chosen compacted partition the worker
   pauses cleaning (``abort_and_pause``: a clean of its own running there stops first; pauses
   nest with the annotations' and the admin verbs'), plans the round exactly as its cleaner
   would (:func:`storagecore.cleaner.round_plan.plan_round`), pins the planned segment files
   (:mod:`storagecore.pins`: retention or a DeleteRecords cannot take the bytes away while
   executors read them), and answers with the plans and the pinned paths. The worker keeps its
   own copy of each plan: what it later checks and swaps is never taken from the client.
2. the job's executors write each group's ``<base>.log.cleaned`` beside the segments;
3. **finish** (:meth:`ExternalRounds.finish`) with the bytes written per group: per partition,
   the worker checks that the planned segments are still its log's, unchanged, and that each
   cleaned copy has the reported size, then swaps them in with the log's crash-safe protocol
   (:func:`storagecore.cleaner.round_plan.swap_planned` → ``Log.replace_segments``) and
   records the round's end in its cleaner checkpoint. A partition whose segments changed keeps
   them (its cleaned copies are deleted). Then it resumes cleaning and releases the pins.
   **abort** (:meth:`ExternalRounds.abort`) does the same without swapping.

Every round has a lease: a job that dies without finishing or aborting is aborted by
:meth:`ExternalRounds.expire` (the worker's reload task). A worker killed at any point leaves
each partition old or new: before a swap the loader deletes ``.cleaned`` files, during one the
swap protocol completes or rolls back, pauses are in memory only and pins expire.

Pure bookkeeping around the storage core; the HTTP edge is :mod:`storageworker.http`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storagecore import files, pins
from storagecore.cleaner.log_cleaner import LogCleaner
from storagecore.cleaner.manager import CleaningState
from storagecore.cleaner.round_plan import RoundPlan, plan_round, swap_planned
from storagecore.clock import Clock
from storagecore.config import TopicPartition
from storagecore.errors import ConfigError, StorageError
from storagecore.log_manager import LogManager

logger = logging.getLogger(__name__)

#: Leases are bounded: a job asks for what it needs, at most this.
LEASE_MS_MAX = 24 * 3_600_000


@dataclasses.dataclass(slots=True)
class _Round:
    job: str
    #: The partitions asked for (reserved from the start: one job per partition at a time).
    tps: tuple[TopicPartition, ...]
    plans: dict[TopicPartition, RoundPlan]
    pin_sets: dict[Path, pins.PinSet]
    expires_ms: int
    #: Partitions whose cleaning this round paused (resumed when it ends).
    paused: list[TopicPartition] = dataclasses.field(default_factory=list)


class ExternalRounds:
    """The rounds that jobs run on this worker's logs (at most one per partition)."""

    def __init__(self, log_manager: LogManager, cleaner: LogCleaner, clock: Clock) -> None:
        self.log_manager = log_manager
        self.cleaner = cleaner
        self.clock = clock
        self._lock = threading.Lock()
        self._rounds: dict[str, _Round] = {}
        self.finished = 0
        self.aborted = 0

    def busy(self) -> dict[str, str]:
        """Partition → job, for status."""
        with self._lock:
            return {str(tp): r.job for r in self._rounds.values() for tp in r.tps}

    def _busy_locked(self) -> set[str]:
        return {str(tp) for r in self._rounds.values() for tp in r.tps}

    def chosen(self, topics: Sequence[str], partitions: Sequence[str]) -> list[TopicPartition]:
        """The named partitions, or every partition of the named topics; each must exist and
        be compacted."""
        logs = self.log_manager.logs
        wanted: set[TopicPartition] = set()
        for name in partitions:
            topic, _, number = name.rpartition("-")
            if not topic or not number.isdigit():
                raise ConfigError(f"partition {name!r} is not <topic>-<partition>")
            tp = TopicPartition(topic, int(number))
            if tp not in logs:
                raise ConfigError(f"unknown partition {name}")
            wanted.add(tp)
        for topic in topics:
            matching = {tp for tp in logs if tp.topic == topic}
            if not matching:
                raise ConfigError(f"unknown topic {topic!r}")
            wanted |= matching
        if not wanted:
            raise ConfigError("name at least one topic or partition to compact")
        for tp in wanted:
            if not logs[tp].config.compact:
                policy = ",".join(logs[tp].config.cleanup_policy)
                raise ConfigError(f"{tp}: cleanup.policy is {policy}, not compact")
        return sorted(wanted)

    def begin(self, tps: Sequence[TopicPartition], lease_ms: int) -> dict[str, Any]:
        """Steps 1 of the module docstring; the answer the job gets as JSON."""
        if not 0 < lease_ms <= LEASE_MS_MAX:
            raise ConfigError(f"lease_ms {lease_ms} out of range (1..{LEASE_MS_MAX})")
        now = self.clock.milliseconds()
        job = uuid.uuid4().hex
        with self._lock:
            busy = self._busy_locked()
            taken = [str(tp) for tp in tps if str(tp) in busy]
            if taken:
                raise ConfigError(f"{', '.join(taken)} already in a compact job")
            round_ = _Round(job, tuple(tps), {}, {}, now + lease_ms)
            self._rounds[job] = round_
        manager = self.cleaner.manager
        answer: list[dict[str, Any]] = []
        try:
            for tp in tps:
                # A clean of its own running there stops at its next check (a region, at
                # most 1 MiB, away): waited for without a limit, so that the pause this
                # round takes is always the one it resumes.
                manager.abort_and_pause(tp)
                round_.paused.append(tp)
                log = self.log_manager.get_log(tp)
                round_.plans[tp] = plan = plan_round(
                    log, manager.all_checkpoints().get(tp), now, self.cleaner.config
                )
                answer.append({"plan": plan.to_json(), "read_paths": self._pin(round_, plan)})
        except BaseException:
            self._end(round_, swap=None)
            raise
        logger.info(
            "Compact job %s began on %s (lease %d ms)",
            job,
            ", ".join(str(tp) for tp in round_.plans),
            lease_ms,
        )
        return {"job": job, "expires_ms": round_.expires_ms, "rounds": answer}

    def _pin(self, round_: _Round, plan: RoundPlan) -> list[str]:
        """Pin the planned segment files; the paths to read (the live name where the data dir
        cannot hold pins)."""
        data_dir = Path(plan.directory).parent
        try:
            pin_set = round_.pin_sets.get(data_dir)
            if pin_set is None:
                pin_set = round_.pin_sets[data_dir] = pins.create_pin_set(
                    data_dir, round_.expires_ms
                )
            paths: list[str] = []
            for segment in plan.segments:
                pinned = pins.pin_segment(pin_set, plan.tp, Path(segment.path), segment.inode)
                # Cleaning is paused and the plan is fresh: a segment gone already is one that
                # retention took meanwhile; the swap check will refuse the round.
                paths.append(str(pinned) if pinned is not None else segment.path)
            return paths
        except OSError as exc:
            if exc.errno not in pins.UNPINNABLE_ERRNOS:
                raise
            logger.warning("Compact job %s: %s cannot hold pins: %s", round_.job, data_dir, exc)
            return [s.path for s in plan.segments]

    def _take(self, job: str) -> _Round:
        with self._lock:
            round_ = self._rounds.pop(job, None)
        if round_ is None:
            raise ConfigError(f"no compact job {job!r} (finished, aborted or expired)")
        return round_

    def finish(self, job: str, cleaned: Mapping[str, Sequence[int]]) -> dict[str, str]:
        """Step 3: per partition ``swapped``, ``changed`` (kept as it was) or ``failed: ...``;
        a partition missing from ``cleaned`` is kept as it was (``not cleaned``)."""
        round_ = self._take(job)
        return self._end(round_, swap=cleaned)

    def abort(self, job: str) -> None:
        self._end(self._take(job), swap=None)

    def expire(self) -> int:
        """Abort the rounds whose lease passed (their job died); how many."""
        now = self.clock.milliseconds()
        with self._lock:
            late = [r for r in self._rounds.values() if r.expires_ms < now]
            for round_ in late:
                del self._rounds[round_.job]
        for round_ in late:
            logger.warning("Compact job %s: lease expired; its rounds are dropped", round_.job)
            self._end(round_, swap=None)
        return len(late)

    def _end(self, round_: _Round, swap: Mapping[str, Sequence[int]] | None) -> dict[str, str]:
        outcome: dict[str, str] = {}
        manager = self.cleaner.manager
        try:
            for tp, plan in round_.plans.items():
                sizes = None if swap is None else swap.get(str(tp))
                outcome[str(tp)] = self._swap(plan, sizes) if sizes is not None else "not cleaned"
                _delete_cleaned(plan)
        finally:
            for tp in round_.paused:
                state, _ = manager.state(tp)
                if state is CleaningState.PAUSED:
                    manager.resume(tp)
            for pin_set in round_.pin_sets.values():
                pins.release(pin_set)
            with self._lock:
                if swap is None:
                    self.aborted += 1
                else:
                    self.finished += 1
        logger.info("Compact job %s ended: %s", round_.job, outcome or "aborted")
        return outcome

    def _swap(self, plan: RoundPlan, sizes: Sequence[int]) -> str:
        log = self.log_manager.find_log(plan.tp)
        if log is None or log.offline:
            return "failed: the partition is gone or offline"
        if len(sizes) != len(plan.groups):
            return f"failed: {len(sizes)} cleaned sizes for {len(plan.groups)} groups"
        try:
            if not swap_planned(log, plan, sizes):
                return "changed"
        except StorageError as exc:
            return f"failed: {exc}"
        live = [lg.tp for lg in self.log_manager.logs.values() if lg.parent_dir == log.parent_dir]
        self.cleaner.manager.update_checkpoint(
            log.parent_dir, live, update=(plan.tp, plan.end_offset)
        )
        return "swapped"


def _delete_cleaned(plan: RoundPlan) -> None:
    """The job's ``.cleaned`` files of ``plan`` that were not swapped in (a swap renames
    them away)."""
    directory = Path(plan.directory)
    for group in plan.groups:
        base = plan.segments[group[0]].base_offset
        for path in (
            files.log_file(directory, base, files.CLEANED_SUFFIX),
            files.index_file(directory, base, files.CLEANED_SUFFIX),
            files.time_index_file(directory, base, files.CLEANED_SUFFIX),
            files.txn_index_file(directory, base, files.CLEANED_SUFFIX),
        ):
            path.unlink(missing_ok=True)
