"""Progress files: take an attendee's progress (and optionally their lab folders) from one labserver
to another — from a laptop into the workshop room, or from one laptop to the next.

The format (``schema_version`` 2, UTF-8 JSON, documented in docs/self-paced.md)::

    {
      "format": "labserver-progress",
      "schema_version": 2,
      "exported_at": "2026-11-29T21:40:00+00:00",
      "labserver_version": "0.1.0",
      "source": "Self-paced labs",
      "attendee": {"name": "ada", "event": "selfpaced", "id": 1},
      "labs": [
        {"id": "getting-started",
         "steps": [{"id": "find-device", "status": "passed", "attempts": 2,
                    "passed_at": "2026-11-29T20:01:02+00:00", "message": "..."}],
         "files": [{"path": "rmsnorm.py", "base64": "..."}]}
      ],
      "signature": {"alg": "HMAC-SHA256", "key_id": "...", "value": "..."}
    }

``status`` is one of ``not-started | working | failing | error | passed | imported``; ``passed_at`` is
set exactly when the status is ``passed`` or ``imported``; ``files`` holds the files that differ from the lab's starter and is
absent when there are none or the export was made without files.

Importing is all-or-nothing for the database: the whole file is read and validated first (JSON,
format, version, every field, every path, every base64 blob), and a file that fails raises
:class:`ProgressFileError` with a message for people before anything changes. Then every *passed*
(or *imported*) step of a lab and step that exist here, that pacing has not locked and that is not
passed or imported here already, is recorded as a check run with a message saying so
(``passed_at`` kept); steps that were only attempted are not carried over.

Trust (:mod:`labserver.services.reporting.progress_signing`): the file is *own* when this server signed it for
this very attendee. On an event server only own files are accepted (anything else raises
:class:`ProgressSignatureError` before anything changes) and their steps are recorded as
``imported``, a state of its own that the instructor sees, never as ``passed``. On a self-paced
server an own file (the same laptop) restores ``passed``; a file from elsewhere (another laptop, an
unsigned version 1 file) gives ``imported`` at most. An export carries only the files that differ from the lab's starter;
with files, each imported lab folder is first moved to the workspace's ``.backups/`` (like "reset
lab"), seeded again from the starter, and then the exported files are written over it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlmodel import Session, col, select

from labserver import __version__, clock
from labserver.backends.base import LabSeed, PathRefused, safe_relpath
from labserver.backends.local import HIDDEN
from labserver.content import Lab
from labserver.edge import safe_json
from labserver.models import NOT_ATTEMPTS, Attendee, CheckRun, CheckStatus, Event
from labserver.services.context import AppContext
from labserver.services.dashboard.pacing import is_locked
from labserver.services.grading.checking import publish_finished
from labserver.services.provisioning.environments import ensure_environment, event_labs
from labserver.services.reporting import progress_signing
from labserver.services.reporting.progress import lab_progress

FORMAT: Literal["labserver-progress"] = "labserver-progress"
SCHEMA_VERSION = 2
READS = (1, 2)  # version 1 files are unsigned: foreign (see the module docstring)
IMPORT_TAG = "[imported] "
MAX_FILE_BYTES = 2 * 1024 * 1024  # per file in an export
#: per lab folder in an export (in base64, an import of three labs stays under body_limit.IMPORT_MAX)
MAX_LAB_BYTES = 3 * 1024 * 1024

RESERVED = {*HIDDEN, "__pycache__"}  # names a backend refuses to write or never lists

StepStatus = Literal["not-started", "working", "failing", "error", "passed", "imported"]
DONE = ("passed", "imported")


class ProgressFileError(ValueError):
    """A progress file that cannot be imported; ``str(exc)`` is the message for people."""


class ProgressSignatureError(ProgressFileError):
    """A valid file this event server will not take: not signed by it for this attendee."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepRecord(_Strict):
    id: str = Field(min_length=1, max_length=64)
    status: StepStatus
    attempts: int = Field(ge=0)
    passed_at: dt.datetime | None = None
    message: str = Field(default="", max_length=10_000)

    @model_validator(mode="after")
    def _passed_at_iff_passed(self) -> StepRecord:
        if (self.status in DONE) != (self.passed_at is not None):
            raise ValueError("passed_at must be set exactly when status is 'passed' or 'imported'")
        return self


class FileRecord(_Strict):
    path: str = Field(min_length=1, max_length=500)
    base64: str

    @field_validator("path")
    @classmethod
    def _safe(cls, value: str) -> str:
        try:
            rel = safe_relpath(value)
        except PathRefused:
            rel = ""
        if not rel or rel != value or any(part in RESERVED for part in rel.split("/")):
            raise ValueError(f"file path {value!r} is not a plain relative path inside the lab folder")
        return value

    def data(self) -> bytes:
        return base64.b64decode(self.base64, validate=True)


class LabRecord(_Strict):
    id: str = Field(min_length=1, max_length=64)
    steps: list[StepRecord] = Field(default_factory=list)
    files: list[FileRecord] | None = None


class AttendeeRecord(_Strict):
    name: str = Field(max_length=200)
    event: str | None = Field(default=None, max_length=64)  # the event code (version 2)
    id: int | None = None  # the attendee id on the server that signed the file (version 2)


class SignatureRecord(_Strict):
    alg: str = Field(max_length=32)
    key_id: str = Field(default="", max_length=64)
    value: str = Field(max_length=128)


class ProgressFile(_Strict):
    format: Literal["labserver-progress"]
    schema_version: int
    exported_at: dt.datetime
    labserver_version: str = ""
    source: str = ""
    attendee: AttendeeRecord
    labs: list[LabRecord]
    signature: SignatureRecord | None = None
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)  # the JSON as read, for the signature

    def doc(self) -> dict[str, Any]:
        """The JSON document (as read when parsed, else as it will be written)."""
        return self._raw or self.model_dump(mode="json", exclude_none=True)


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)  # "lab/step" newly recorded (see ``status``)
    status: str = "passed"  # what the new runs are: passed (own file, self-paced) or imported
    trust: str = "own"  # own | foreign (services/reporting/progress_signing.py)
    locked: list[str] = field(default_factory=list)  # "lab/step": pacing has it locked, not imported
    already: list[str] = field(default_factory=list)  # passed here before
    skipped: list[str] = field(default_factory=list)  # "lab" or "lab/step": not in this event
    restored_labs: list[str] = field(default_factory=list)
    backups: dict[str, str] = field(default_factory=dict)  # lab -> workspace-relative backup

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- reading ------------------------------------------------------------------------------------
def _utc(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def parse_progress(raw: bytes | str) -> ProgressFile:
    """Validate a whole progress file; raises :class:`ProgressFileError` (nothing has changed)."""
    try:
        data = safe_json.loads(raw)
    except safe_json.JSONLimitError as exc:
        raise ProgressFileError(f"This progress file cannot be read: {exc}. Export it again.") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProgressFileError(f"This is not a progress file: it is not valid JSON ({exc}).") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProgressFileError(
            'This is not a labserver progress file (its "format" is not "labserver-progress"). '
            "Make one with `labserver progress export FILE`."
        )
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProgressFileError("This progress file has no valid schema_version.")
    if version > SCHEMA_VERSION:
        raise ProgressFileError(
            f"This progress file has schema version {version}, made by a newer labserver; this one "
            f"reads version {SCHEMA_VERSION}. Update labserver (pip install -U labserver) and try again."
        )
    if version not in READS:
        raise ProgressFileError(
            f"This progress file has schema version {version}; this labserver reads versions "
            f"{', '.join(map(str, READS))} only."
        )
    try:
        parsed = ProgressFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ProgressFileError(
            f"This progress file is damaged: {where}: {err['msg']} ({len(exc.errors())} problem(s) in all)."
        ) from exc
    parsed._raw = data
    seen: set[str] = set()
    for lab in parsed.labs:
        if lab.id in seen:
            raise ProgressFileError(f"This progress file is damaged: lab {lab.id!r} appears twice.")
        seen.add(lab.id)
        for rec in lab.files or []:
            try:
                rec.data()
            except (binascii.Error, ValueError) as exc:
                raise ProgressFileError(
                    f"This progress file is damaged: the content of {lab.id}/{rec.path} is not valid base64."
                ) from exc
    return parsed


# -- exporting -------------------------------------------------------------------------------------
def _import_info(run: CheckRun) -> dict[str, Any] | None:
    if not run.log.startswith(IMPORT_TAG):
        return None
    try:
        info = json.loads(run.log[len(IMPORT_TAG) :])
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _lab_record(session: Session, *, event: Event, attendee_id: int, lab: Lab) -> LabRecord:
    prog = lab_progress(session, event=event, attendee_id=attendee_id, lab=lab)
    runs = session.exec(
        select(CheckRun)
        .where(CheckRun.attendee_id == attendee_id, CheckRun.lab_id == lab.id)
        .order_by(col(CheckRun.id))
    ).all()
    steps = []
    for sp in prog.steps:
        mine = [r for r in runs if r.step_id == sp.id and r.status not in NOT_ATTEMPTS]
        attempts = 0
        for run in mine:
            info = _import_info(run)
            attempts += int(info.get("attempts", 1)) if info else 1
        first = next((r for r in mine if r.status == CheckStatus.passed), None)
        if first is None:
            first = next((r for r in mine if r.status == CheckStatus.imported), None)
        passed_at = _utc(first.finished_at or first.created_at) if first else None
        message = (first.message if first else (mine[-1].message if mine else ""))[:10_000]
        steps.append(
            StepRecord(
                id=sp.id,
                status=sp.status,  # type: ignore[arg-type]
                attempts=attempts,
                passed_at=passed_at,
                message=message,
            )
        )
    return LabRecord(id=lab.id, steps=steps)


def _same_as_starter(lab: Lab, rel: str, size: int) -> Path | None:
    """The starter's copy of ``rel`` when it has the same size (compare bytes next), else None."""
    path = lab.starter / rel
    return path if path.is_file() and path.stat().st_size == size else None


async def _lab_files(ctx: AppContext, ref: Any, lab: Lab, skipped: list[str]) -> list[FileRecord] | None:
    """The lab folder's files that differ from the lab's starter (an import starts the folder from
    the starter and writes these over it); None when there are none."""
    entries = await ctx.backend.list_files(ref, lab.id)
    prefix = lab.id + "/"
    out: list[FileRecord] = []
    total = 0
    for entry in entries:
        if entry.is_dir:
            continue
        rel = entry.path.removeprefix(prefix)
        starter_copy = _same_as_starter(lab, rel, entry.size)
        if entry.size > MAX_FILE_BYTES or total + entry.size > MAX_LAB_BYTES:
            if (
                starter_copy is None
                or await ctx.backend.read_file(ref, entry.path) != starter_copy.read_bytes()
            ):
                skipped.append(f"{lab.id}/{rel} ({entry.size} bytes: too big)")
            continue
        data = await ctx.backend.read_file(ref, entry.path)
        if starter_copy is not None and data == starter_copy.read_bytes():
            continue
        total += len(data)
        out.append(FileRecord(path=rel, base64=base64.b64encode(data).decode("ascii")))
    return out or None


async def export_progress(
    ctx: AppContext,
    session: Session,
    *,
    event: Event,
    attendee: Attendee,
    with_files: bool = False,
    skipped_files: list[str] | None = None,
) -> ProgressFile:
    """The attendee's progress in every lab of the event (and their lab folders when asked).
    Files too big to carry are listed in ``skipped_files``."""
    assert attendee.id is not None
    labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, event)]
    records = [_lab_record(session, event=event, attendee_id=attendee.id, lab=lab) for lab in labs]
    if with_files:
        ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
        skipped = skipped_files if skipped_files is not None else []
        for lab, record in zip(labs, records, strict=True):
            record.files = await _lab_files(ctx, ref, lab, skipped)
    progress = ProgressFile(
        format=FORMAT,
        schema_version=SCHEMA_VERSION,
        exported_at=clock.now(),
        labserver_version=__version__,
        source=event.title,
        attendee=AttendeeRecord(name=attendee.name, event=event.code, id=attendee.id),
        labs=records,
    )
    sig = progress_signing.sign(progress.doc(), ctx.settings.ensure_secret_key())
    progress.signature = SignatureRecord(**sig)
    return progress


def dump_progress(progress: ProgressFile) -> str:
    return progress.model_dump_json(indent=1, exclude_none=True) + "\n"


# -- importing -------------------------------------------------------------------------------------
def _passed_steps(session: Session, attendee_id: int, lab_id: str) -> set[str]:
    rows = session.exec(
        select(CheckRun.step_id).where(
            CheckRun.attendee_id == attendee_id,
            CheckRun.lab_id == lab_id,
            col(CheckRun.status).in_([CheckStatus.passed, CheckStatus.imported]),
        )
    ).all()
    return set(rows)


def import_policy(
    ctx: AppContext, *, event: Event, attendee: Attendee, progress: ProgressFile
) -> tuple[str, str]:
    """(trust, status of the new runs) for this file; raises :class:`ProgressSignatureError` on an
    event server for a file it did not sign for this attendee (module docstring)."""
    assert attendee.id is not None
    identity: dict[str, Any] = (
        {"name": attendee.name} if event.selfpaced else {"event": event.code, "id": attendee.id}
    )
    trust = progress_signing.trust_of(progress.doc(), ctx.settings.ensure_secret_key(), identity=identity)
    if event.selfpaced:
        return trust, CheckStatus.passed if trust == "own" else CheckStatus.imported
    if trust != "own":
        raise ProgressSignatureError(
            "This event server only takes back progress files it exported for you "
            "(GET /api/v1/progress/export). This file is unsigned, edited, made for someone else or "
            "made by another labserver, so nothing was imported: run Check on each step here instead "
            "(your files can be copied in with the editor or the terminal)."
        )
    return trust, CheckStatus.imported


async def import_progress(
    ctx: AppContext,
    session: Session,
    *,
    event: Event,
    attendee: Attendee,
    progress: ProgressFile,
    restore_files: bool = True,
) -> ImportReport:
    """Record the file's passed steps for ``attendee`` (see the module docstring). ``progress``
    comes from :func:`parse_progress`, so it is already valid."""
    assert event.id is not None and attendee.id is not None
    trust, new_status = import_policy(ctx, event=event, attendee=attendee, progress=progress)
    here = set(event_labs(ctx, event))
    report = ImportReport(status=str(new_status), trust=trust)
    new_runs: list[CheckRun] = []
    restore: list[tuple[Lab, list[FileRecord]]] = []
    source = progress.source or "another labserver"
    for record in progress.labs:
        lab = ctx.catalog.labs.get(record.id)
        if lab is None or record.id not in here:
            report.skipped.append(record.id)
            continue
        passed_here = _passed_steps(session, attendee.id, lab.id)
        for step in record.steps:
            key = f"{lab.id}/{step.id}"
            found = lab.step(step.id)
            if found is None:
                report.skipped.append(key)
                continue
            if step.status not in DONE or step.passed_at is None:
                continue
            if is_locked(event, lab, found.index):
                report.locked.append(key)
                continue
            if step.id in passed_here:
                report.already.append(key)
                continue
            when = _utc(step.passed_at)
            info = {
                "attempts": max(step.attempts, 1),
                "source": source,
                "exported_at": _utc(progress.exported_at).isoformat(),
                "name": progress.attendee.name,
            }
            new_runs.append(
                CheckRun(
                    event_id=event.id,
                    attendee_id=attendee.id,
                    lab_id=lab.id,
                    step_id=step.id,
                    status=new_status if step.status == "passed" else CheckStatus.imported,
                    message=(
                        f"Imported from a progress file: passed on {when:%Y-%m-%d %H:%M} UTC in "
                        f"“{source}”. {step.message}"
                    ).strip()[:10_000],
                    log=IMPORT_TAG + json.dumps(info, ensure_ascii=False),
                    duration_s=0.0,
                    created_at=when,
                    finished_at=when,
                )
            )
            report.imported.append(key)
        if restore_files and record.files is not None:
            restore.append((lab, record.files))
    for run in new_runs:
        session.add(run)
    try:
        if restore:
            ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
            stamp = clock.now().strftime("%Y%m%d-%H%M%S") + "-import"
            for lab, files in restore:
                await ctx.terminals.close((ref.env_id, lab.id))
                report.backups[lab.id] = await ctx.backend.reset_lab(ref, LabSeed(lab.id, lab.starter), stamp)
                for rec in files:
                    await ctx.backend.write_file(ref, f"{lab.id}/{rec.path}", rec.data())
                report.restored_labs.append(lab.id)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    for run in new_runs:
        session.refresh(run)
        publish_finished(ctx, run, attendee, imported=True)
    return report
