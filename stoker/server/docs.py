"""The API's contract and its docs page: the one error model, the answers each call can give,
the job id pattern, the security schemes, and Swagger UI served from the package (``/docs``
works without internet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from starlette.staticfiles import StaticFiles

SWAGGER_UI_VERSION = "5.35.0"  # npm swagger-ui-dist, copied into static/swagger-ui
STATIC_DIR = Path(__file__).parent / "static"
STATIC_URL = "/static"
DOCS_URL = "/docs"
OPENAPI_URL = "/openapi.json"

# What stoker.types.job_id accepts, said without a look-ahead (JSON Schema patterns are
# ECMA-262 and pydantic's are Rust's): 1-100 characters of letters, digits, '.', '_' or '-',
# starting with a letter or digit, no '..' anywhere. Lengths are minLength/maxLength.
JOB_ID_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9_-]|\.[A-Za-z0-9_-])*\.?$"
JOB_ID_MAX = 100
JOB_ID_HELP = (
    "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit, no '..' (the "
    "pattern and lengths below)"
)


class ErrorAnswer(BaseModel):
    """The body of every refusal (4xx, 5xx): ``error`` says what is wrong and what to do."""

    error: str = Field(..., description="What is wrong, and what is allowed or what to do.")
    type: str | None = Field(
        None,
        description="The error's kind: InvalidInput, JobNotFound, JobConflict, JobTerminal, "
        "DuplicateJob, Unauthorized, Forbidden, MethodNotAllowed, NotFound, NotLeader, "
        "StoreError.",
    )
    field: str | None = Field(None, description="422: the field at fault (dotted path).")
    job_id: str | None = Field(None, description="The job the error is about.")
    state: str | None = Field(None, description="409 JobTerminal: the state the job ended in.")
    difference: str | None = Field(
        None, description="409 JobConflict: how the live job's spec differs from this one."
    )


_ERROR_REF = {"$ref": "#/components/schemas/ErrorAnswer"}
_WHY = {
    401: "Token missing or wrong: send 'Authorization: Bearer <token>' (stoker CLI: --token "
    "or STOKER_TOKEN).",
    403: "The token is read-only and this call changes state.",
    404: "No such job (or attempt).",
    409: "The job id is live with another spec (`difference`), or the job has ended (`state`; "
    'submit it with "restart": true to run it again).',
    422: "Bad input: `field` names the field, `error` says what is allowed. Nothing changed.",
    503: "The store is unavailable, or this manager lost the leader lease mid-call.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: each code with the one error model."""
    return {code: {"model": ErrorAnswer, "description": _WHY[code]} for code in codes}


def install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) from files served by this process: no CDN, no other host."""
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    ui = f"{STATIC_URL}/swagger-ui"

    @app.get(DOCS_URL, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{ui}/swagger-ui-bundle.js",
            swagger_css_url=f"{ui}/swagger-ui.css",
            swagger_favicon_url=f"{ui}/favicon-32x32.png",
            # No badge fetched from the public validator; keep a token typed into Authorize.
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )


def install_openapi(app: FastAPI, *, token: bool, open_paths: frozenset[str]) -> None:
    """``/openapi.json`` as the server behaves: with a token, every operation but
    ``open_paths`` declares the bearer token (or ``X-Stoker-Token``); FastAPI's own 422 model,
    which this server never sends, is gone."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        comps = schema.setdefault("components", {})
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                for code, answer in op.get("responses", {}).items():
                    content = answer.get("content", {})
                    # A refusal is JSON even where the success is text (logs, metrics).
                    if code[0] in "45" and "application/json" not in content:
                        answer["content"] = {
                            "application/json": {"schema": _ERROR_REF},
                        }
        for name in ("HTTPValidationError", "ValidationError"):
            comps.get("schemas", {}).pop(name, None)
        if token:
            comps["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The token given to `stoker server --token` (or the "
                    "read-only `--read-token`, for GET calls).",
                },
                "tokenHeader": {"type": "apiKey", "in": "header", "name": "X-Stoker-Token"},
            }
            for path, ops in schema.get("paths", {}).items():
                if path in open_paths:
                    continue
                for op in ops.values():
                    op["security"] = [{"bearer": []}, {"tokenHeader": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
