"""The dashboard's routes: one bookmarkable page per view, the forms that change things (POST only,
with a CSRF token), the charts' data, the login.

A page's figures live in its `#live` region: the page's script fetches the same URL with
`fragment=live` every few seconds and swaps that region in (no full reload), and fetches its
charts' data from `/api/...`. After a change, the browser is sent back (303) to the page with a
notice signed by the dashboard, so a link cannot make a page show words of someone else's.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from rocketspark.dashboard import actions, charts, cluster_view, group_view, message_view, topic_view
from rocketspark.dashboard.message_view import NotFoundError
from rocketspark.dashboard.security import CSRF_FIELD, SESSION_COOKIE, safe_next

if TYPE_CHECKING:
    from rocketspark.dashboard.app import Dashboard


class BadInputError(ValueError):
    """A parameter a person typed is malformed: a 400 page saying which and how to write it."""


def parse_time(name: str, text: str | None) -> int:
    """A time given as milliseconds since 1970 (10 digits: seconds), or ISO 8601 (`2024-05-01T10:00`,
    local time unless it has an offset), in ms."""
    value = (text or "").strip()
    if not value:
        raise BadInputError(f"{name} is missing: give a time such as 2024-05-01T10:00 (local time)")
    if value.isdigit() and len(value) <= 16:
        number = int(value)
        return number * 1000 if len(value) <= 10 else number
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise BadInputError(
            f"{name} {value[:80]!r} is not a time: give 2024-05-01T10:00 (local time), an ISO 8601 time "
            "with its offset, or milliseconds since 1970"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def parse_int(name: str, text: str | None, default: int) -> int:
    if text is None or not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{name} {text[:40]!r} is not a whole number") from None


class Pages:
    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        fragment = request.query_params.get("fragment") == "live"
        notice = request.query_params.get("done", "")
        signed = bool(notice) and self.d.guard.verify("done:" + notice, request.query_params.get("sig", ""))
        return self.d.templates.TemplateResponse(
            request,
            template,
            {
                "fragment": fragment,
                "notice": notice if signed else "",
                "csrf": self.d.guard.csrf_token(request),
                "refresh_ms": int(self.d.settings.refresh_s * 1000),
                "password": self.d.guard.password is not None,
                **context,
            },
            status_code=status,
        )

    def done(self, path: str, notice: str) -> Response:
        query = urlencode({"done": notice, "sig": self.d.guard.sign("done:" + notice)})
        return RedirectResponse(f"{path}?{query}", status_code=303)

    async def form(self, request: Request) -> dict[str, str]:
        """The POST's fields, once its CSRF token is checked (PermissionError otherwise)."""
        fields = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        refusal = self.d.guard.csrf_refusal(request, fields.get(CSRF_FIELD))
        if refusal is not None:
            raise PermissionError(refusal)
        return fields

    # -- pages --------------------------------------------------------------------------------------

    async def cluster(self, request: Request) -> Response:
        overview = await cluster_view.cluster_overview(self.d.admin)
        return self.render(request, "cluster.html", overview=overview, page="cluster")

    async def topics(self, request: Request) -> Response:
        include_system = request.query_params.get("all") == "1"
        listing = await topic_view.topic_list(self.d.admin, include_system=include_system)
        return self.render(request, "topics.html", listing=listing, include_system=include_system, page="topics")

    async def topic(self, request: Request) -> Response:
        name = request.path_params["topic"]
        detail = await topic_view.topic_detail(self.d.admin, name)
        if detail is None:
            raise NotFoundError(f"topic {name} does not exist (no broker serves it)")
        return self.render(request, "topic.html", topic=detail, page="topics")

    async def groups(self, request: Request) -> Response:
        listing = await group_view.group_list(self.d.admin)
        return self.render(request, "groups.html", listing=listing, page="groups")

    async def group(self, request: Request) -> Response:
        name = request.path_params["group"]
        detail = await group_view.group_detail(self.d.admin, name)
        if detail is None:
            raise NotFoundError(f"consumer group {name} is not known to any broker")
        return self.render(request, "group.html", group=detail, page="groups")

    async def messages(self, request: Request) -> Response:
        q = request.query_params
        topic, key, msg_id = q.get("topic", "").strip(), q.get("key", "").strip(), q.get("msgId", "").strip()
        found = None
        search = ""
        if msg_id:
            search, found = "id", await message_view.by_id(self.d.admin, msg_id, topic or None)
        elif topic and key:
            search, found = "key", await message_view.by_key(self.d.admin, topic, key)
        elif topic and (q.get("start") or q.get("end")):
            start = parse_time("start", q.get("start"))
            end = parse_time("end", q.get("end")) if q.get("end") else int(time.time() * 1000) + 1
            if end <= start:
                raise BadInputError("end must be after start")
            search, found = "time", await message_view.by_time(self.d.admin, topic, start, end)
        elif topic or key or q.get("start") or q.get("end"):
            raise BadInputError("give topic and key, topic and start (and end), or msgId")
        if found is not None and not found.messages and not found.failures:
            raise NotFoundError(f"no message of topic {topic} matches")
        shown = [
            (m, views, q.get("view") if q.get("view") in views else message_view.default_view(views))
            for m in (found.messages if found else [])
            for views in [message_view.body_views(m.body)]
        ]
        return self.render(
            request,
            "messages.html",
            found=found,
            shown=shown,
            search=search,
            query=dict(q),
            resend_target=message_view.resend_target,
            page="messages",
        )

    # -- changes --------------------------------------------------------------------------------------

    async def create_topic(self, request: Request) -> Response:
        fields = await self.form(request)
        name = fields.get("topic", "").strip()
        notice = await actions.create(self.d.admin, name, parse_int("queues", fields.get("queues"), 8))
        return self.done(f"/topics/{name}", notice)

    async def delete_topic(self, request: Request) -> Response:
        await self.form(request)
        return self.done("/topics", await actions.delete(self.d.admin, request.path_params["topic"]))

    async def reset_group(self, request: Request) -> Response:
        fields = await self.form(request)
        group = request.path_params["group"]
        when = parse_time("time", fields.get("time"))
        notice = await actions.reset(self.d.admin, group, fields.get("topic") or None, when)
        return self.done(f"/groups/{group}", notice)

    async def resend(self, request: Request) -> Response:
        fields = await self.form(request)
        msg_id = fields.get("msgId", "").strip()
        if not msg_id:
            raise BadInputError("msgId is missing")
        notice = await actions.resend(self.d.admin, self.d.producer_options, msg_id)
        return self.done("/messages", notice)

    # -- charts' data ---------------------------------------------------------------------------------

    async def cluster_series(self, request: Request) -> Response:
        brokers = sorted(self.d.admin.known)
        return JSONResponse([line.to_json() for line in await charts.cluster_lines(self.d.history, brokers)])

    async def topic_series(self, request: Request) -> Response:
        lines = await charts.topic_lines(self.d.history, request.path_params["topic"])
        return JSONResponse([line.to_json() for line in lines])

    async def group_series(self, request: Request) -> Response:
        lines = await charts.group_lines(self.d.history, request.path_params["group"])
        return JSONResponse([line.to_json() for line in lines])

    # -- login --------------------------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self.render(request, "login.html", next=safe_next(request.query_params.get("next")), page="login")

    async def login(self, request: Request) -> Response:
        fields = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        target = safe_next(fields.get("next"))
        if not self.d.guard.password_matches(fields.get("password", "")):
            return self.render(request, "login.html", status=401, next=target, failed=True, page="login")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(SESSION_COOKIE, self.d.guard.new_session(), httponly=True, samesite="strict")
        return response

    async def logout(self, request: Request) -> Response:
        await self.form(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    def error(self, request: Request, status: int, title: str, message: str) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status)
        if request.query_params.get("fragment") == "live":
            return HTMLResponse("", status_code=status)  # the script keeps the figures it has
        return self.render(request, "error.html", status=status, title=title, message=message, page="")
