"""A small client of the job manager's REST API, used by the CLI."""

from __future__ import annotations

from typing import Any

import httpx

from stoker.errors import (
    InvalidInput,
    JobConflict,
    JobNotFound,
    JobTerminal,
    ManagerUnavailable,
    StokerError,
    Unauthorized,
)


class Client:
    """Calls one job manager; answers become records or the matching :class:`StokerError`."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ManagerUnavailable(f"cannot reach the job manager at {self.url}: {e}") from e
        if resp.status_code < 400:
            return resp
        try:
            body = resp.json()
        except ValueError:
            body = {"error": resp.text}
        msg = str(body.get("error", resp.text))
        kind = body.get("type")
        job = str(body.get("job_id", path))
        if resp.status_code in (401, 403):
            raise Unauthorized(msg)
        if resp.status_code == 404:
            raise JobNotFound(job)
        if resp.status_code == 422:
            field = str(body.get("field", "request"))
            raise InvalidInput(field, msg.removeprefix(f"{field}: "))  # the message names it
        if kind == "JobTerminal":
            raise JobTerminal(job, str(body.get("state")))
        if kind == "JobConflict":
            raise JobConflict(job, str(body.get("difference")))
        raise StokerError(f"job manager answered {resp.status_code}: {msg}")

    def submit(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        resp = self._call("POST", "/v1/jobs", json=body)
        return resp.status_code, resp.json()

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/jobs/{job_id}").json())

    def jobs(self, state: str | None = None) -> list[dict[str, Any]]:
        params = {"state": state} if state else {}
        return list(self._call("GET", "/v1/jobs", params=params).json())

    def epochs(self, job_id: str, limit: int = 100) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/v1/jobs/{job_id}/epochs", params={"limit": limit}).json())

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/v1/jobs/{job_id}/attempts").json())

    def cancel(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/v1/jobs/{job_id}/cancel").json())

    def log(self, job_id: str, attempt: int, tail: int | None = None) -> str:
        params = {"tail": tail} if tail else {}
        return self._call("GET", f"/v1/jobs/{job_id}/attempts/{attempt}/log", params=params).text
