"""/v1/profiles: store a profile written by `planner profile`, read it back."""

from __future__ import annotations

from fastapi import Response
from starlette.concurrency import run_in_threadpool

from cost_model.hardware.profile_schema import profile_from_dict
from cost_model.specs.errors import SpecError
from planner.ids import new_id

from ..deps import StoreDep
from ..errors import ApiError
from ..responses import ProfileOut
from ..schemas import MAX_PROFILE_BODY_BYTES, ProfileIn
from ._common import COMMON_ERRORS, err, evaluation_failed, v1_router

router = v1_router("profiles")


@router.post("/profiles", status_code=201, response_model=ProfileOut,
             responses={**COMMON_ERRORS, 413: err(f"request body over {MAX_PROFILE_BODY_BYTES} bytes "
                                                  "(or PLANNER_MAX_BODY_BYTES when lower)")})
async def create_profile(body: ProfileIn, store: StoreDep, response: Response) -> ProfileOut:
    """Store a profile written by `planner profile`; reference it as `cluster.profile_id`.
    Unknown top-level keys are refused by name (free-form notes go under `metadata`)."""
    d = body.model_dump(mode="json", exclude_unset=True)  # stored as sent, without the defaults
    try:
        profile_from_dict(d)  # reject what plans could not use, now rather than at plan time
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise evaluation_failed(exc, "profile reader") from None
    pid = new_id("prof")
    created = await run_in_threadpool(store.put_profile, pid, d["device"], d)
    response.headers["Location"] = f"/v1/profiles/{pid}"
    return ProfileOut(id=pid, device=d["device"], schema_version=d["schema_version"], created_at=created / 1e6)


@router.get("/profiles/{profile_id}", response_model=ProfileOut, responses={404: err("unknown profile id")})
async def get_profile(profile_id: str, store: StoreDep) -> ProfileOut:
    found = await run_in_threadpool(store.get_profile, profile_id)
    if found is None:
        raise ApiError(404, "not_found", f"no profile {profile_id!r}", {"id": profile_id})
    body, created = found
    return ProfileOut(**{**body, "id": profile_id, "created_at": created / 1e6})
