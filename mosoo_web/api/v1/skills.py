"""Skills from code or CI: upload (a new skill or its next version), list, read, versions,
download, uninstall."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from mosoo_core import identity, skills
from mosoo_core.db import session_scope
from mosoo_core.errors import InvalidInput, PayloadTooLarge
from mosoo_web.api.v1._auth import CallerDep
from mosoo_web.api.v1._errors import error_responses
from mosoo_web.api.v1._idempotency import answer_once
from mosoo_web.api.v1._uploads import UploadLimit, check_upload_headers, upload_body, upload_form
from mosoo_web.api.v1.environments import app_for
from mosoo_web.api.v1.files import content_disposition
from mosoo_web.api.v1.schemas import (
    NO_NUL,
    REPLAYED_DOC,
    Deleted,
    ErrorResponse,
    IdempotencyKey,
    attachment_response,
)
from mosoo_web.api.v1.skill_schemas import (
    Skill,
    SkillId,
    SkillList,
    SkillUploaded,
    SkillVersion,
    SkillVersionList,
)

router = APIRouter(tags=["Skills"])

MAX_SKILL_BYTES = skills.SKILL_LIMITS.max_bytes
_LIMIT = UploadLimit(
    max_bytes=MAX_SKILL_BYTES,
    too_large=f"Skill uploads are limited to {MAX_SKILL_BYTES // (1024 * 1024)} MiB.",
    what="the skill",
)
MAX_VERSION = 2**31 - 1  # the `number` column (INTEGER)

_UPLOAD_BODY = upload_body(
    "A `.md` file (it becomes SKILL.md) or a `.zip` with SKILL.md at its root or in one top "
    f"folder (≤ {MAX_SKILL_BYTES // (1024 * 1024)} MiB).",
    app_id={
        "type": "string",
        "maxLength": 26,
        "pattern": NO_NUL,
        "description": "The App; the account's first App if left out.",
    },
)
_INVALID = (
    "`invalid_request`: the upload is not a skill; `field` names what is at fault: `file` (not "
    "a .md or .zip, no SKILL.md, a path, a size or a file the `.agent` checks refuse), "
    "`front_matter` (missing or not YAML), or a front matter field (`name`, `description`, "
    "`license`, `compatibility`, `metadata`, `allowed-tools`)."
)
_SKILL_TOO_LARGE = {
    "model": ErrorResponse,
    "description": f"`payload_too_large`: the upload is over {MAX_SKILL_BYTES // (1024 * 1024)} MiB.",
}


@router.get(
    "/skills",
    response_model=SkillList,
    operation_id="listSkills",
    summary="List skills",
    description="The skills of the token owner's Apps (or of one, with `app_id`), by name, each "
    "with its latest version and the agents that bind it.",
    responses=error_responses(404),
)
async def list_skills(
    caller: CallerDep,
    app_id: Annotated[str | None, Query(max_length=26, pattern=NO_NUL)] = None,
) -> SkillList:
    def work() -> SkillList:
        with session_scope() as db:
            apps = (
                [identity.get_app(db, caller.account_id, app_id)]
                if app_id
                else identity.list_apps(db, caller.account_id)
            )
            return SkillList(
                skills=[
                    Skill.of(view)
                    for app in apps
                    for view in skills.list_skills(db, caller.account_id, app.id)
                ]
            )

    return await run_in_threadpool(work)


@router.post(
    "/skills",
    status_code=201,
    response_model=SkillUploaded,
    operation_id="uploadSkill",
    summary="Upload a skill",
    description="Multipart fields `file` and, optionally, `app_id`. The front matter's `name` "
    "picks the skill: a new name makes a new skill, a name the App has makes that skill's next "
    "version (none when the content equals the latest version's: `new_version` is false). "
    "Nothing is stored unless every check passes. Agents that follow the latest version get "
    "the new one at their next run; pinned ones keep theirs.",
    openapi_extra={"requestBody": _UPLOAD_BODY},
    responses={
        201: {"headers": REPLAYED_DOC},
        **error_responses(
            404,
            invalid=_INVALID,
            conflicts="`idempotency_conflict`: see `Idempotency-Key`.",
        ),
        413: _SKILL_TOO_LARGE,
    },
)
async def upload_skill(
    request: Request, caller: CallerDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    check_upload_headers(request, _LIMIT)
    async with upload_form(request, _LIMIT) as (upload, form):
        app_field = form.get("app_id")
        if app_field is not None and not isinstance(app_field, str):
            raise InvalidInput("app_id is text.", field="app_id")
        if app_field is not None and (len(app_field) > 26 or "\x00" in app_field):
            raise InvalidInput("app_id is an App id.", field="app_id")
        data = await upload.read(MAX_SKILL_BYTES + 1)
        if len(data) > MAX_SKILL_BYTES:
            raise PayloadTooLarge(_LIMIT.too_large)
        filename = upload.filename or ""

    def work() -> SkillUploaded:
        app_id = app_for(caller.account_id, app_field or None)
        with session_scope() as db:
            return SkillUploaded.of(
                skills.upload_skill(db, caller.account_id, app_id, data, filename)
            )

    fingerprint = {
        "app_id": app_field,
        "filename": filename,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    return await answer_once(request, caller, "POST /skills", fingerprint, 201, work)


@router.get(
    "/skills/{skill_id}",
    response_model=Skill,
    operation_id="getSkill",
    summary="Get a skill",
    description="With its latest version (SKILL.md included) and the agents that bind it.",
    responses=error_responses(404),
)
async def get_skill(skill_id: SkillId, caller: CallerDep) -> Skill:
    def work() -> Skill:
        with session_scope() as db:
            app_id = skills.skill_app_id(db, caller.account_id, skill_id)
            return Skill.of(skills.get_skill(db, caller.account_id, app_id, skill_id))

    return await run_in_threadpool(work)


@router.get(
    "/skills/{skill_id}/versions",
    response_model=SkillVersionList,
    operation_id="listSkillVersions",
    summary="List a skill's versions",
    responses=error_responses(404),
)
async def list_skill_versions(skill_id: SkillId, caller: CallerDep) -> SkillVersionList:
    def work() -> SkillVersionList:
        with session_scope() as db:
            app_id = skills.skill_app_id(db, caller.account_id, skill_id)
            views = skills.list_skill_versions(db, caller.account_id, app_id, skill_id)
        return SkillVersionList(versions=[SkillVersion.of(view) for view in views])

    return await run_in_threadpool(work)


_CONTENT_RESPONSE = attachment_response(
    "The version as uploaded: the zip of its files (`application/zip`, SKILL.md at its root), "
    "or SKILL.md for a `.md` upload (`text/markdown`). Streamed, as an attachment.",
    {"application/zip": {}, "text/markdown": {}},
)


@router.get(
    "/skills/{skill_id}/content",
    operation_id="downloadSkill",
    summary="Download a skill version",
    description="The latest version, or `version`. A download uploads again unchanged.",
    response_class=StreamingResponse,
    responses={200: _CONTENT_RESPONSE, **error_responses(404)},
)
async def download_skill(
    skill_id: SkillId,
    caller: CallerDep,
    version: Annotated[
        int | None,
        Query(ge=1, le=MAX_VERSION, description="A version number; the latest if left out."),
    ] = None,
) -> StreamingResponse:
    def work() -> skills.SkillContent:
        with session_scope() as db:
            app_id = skills.skill_app_id(db, caller.account_id, skill_id)
            return skills.open_skill_content(db, caller.account_id, app_id, skill_id, version)

    content = await run_in_threadpool(work)
    return StreamingResponse(
        content.chunks,
        headers={
            "Content-Type": content.media_type,
            "Content-Disposition": content_disposition(content.filename),
            "Content-Length": str(content.size),
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, no-store",
        },
    )


@router.delete(
    "/skills/{skill_id}",
    response_model=Deleted,
    operation_id="uninstallSkill",
    summary="Uninstall a skill",
    description="Gone from lists and from new runs; its versions are kept. Agents that still "
    "bind it show it missing (a readiness warning, `skill_missing`) and run without it.",
    responses=error_responses(404),
)
async def uninstall_skill(skill_id: SkillId, caller: CallerDep) -> Deleted:
    def work() -> Deleted:
        with session_scope() as db:
            app_id = skills.skill_app_id(db, caller.account_id, skill_id)
            skills.uninstall_skill(db, caller.account_id, app_id, skill_id)
        return Deleted(id=skill_id)

    return await run_in_threadpool(work)
