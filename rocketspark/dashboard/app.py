"""The dashboard as a Starlette application: its settings, the parts every page shares, the guards
run before every route, and the error pages.

The chart library is plotly.js as the `plotly` package from PyPI ships it (`package_data/
plotly.min.js`, the file plotly.py itself embeds for offline figures): the dashboard serves it from
the installed package at /static/vendor/plotly.min.js, so a page needs no network and the repository
holds none of its code.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rocketspark.dashboard import filters
from rocketspark.dashboard.actions import ActionError
from rocketspark.dashboard.admin import ClusterAdmin, NamesrvUnreachableError
from rocketspark.dashboard.history import DEFAULT_RETENTION_S, History
from rocketspark.dashboard.message_view import NotFoundError
from rocketspark.dashboard.pages import BadInputError, Pages
from rocketspark.dashboard.sampler import Sampler
from rocketspark.dashboard.security import CSRF_COOKIE, MAX_BODY_BYTES, OPEN_PATHS, Guard
from rocketspark.errors import RocketMQError

log = logging.getLogger(__name__)

DEFAULT_PORT = 8082
PASSWORD_ENV = "ROCKETSPARK_DASHBOARD_PASSWORD"


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    namesrv: tuple[str, ...]
    data_dir: Path
    #: RemotingClient's keyword arguments: use_tls, tls_trust, credentials (as the CLI builds them)
    client_options: Mapping[str, Any] = field(default_factory=dict)
    password: str | None = None
    sample_interval_s: float = 15.0
    refresh_s: float = 5.0
    request_timeout_s: float = 3.0
    retention_s: float = DEFAULT_RETENTION_S


class Dashboard:
    """What every page shares: the admin session, the history and its sampler, the guard."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.admin = ClusterAdmin(settings.namesrv, settings.client_options, settings.request_timeout_s)
        self.history = History(settings.data_dir / "history.sqlite3", retention_s=settings.retention_s)
        self.sampler = Sampler(self.admin, self.history, settings.sample_interval_s)
        self.guard = Guard(settings.password)
        environment = Environment(
            loader=PackageLoader("rocketspark.dashboard", "templates"), autoescape=select_autoescape(default=True)
        )
        filters.install(environment)
        self.templates = Jinja2Templates(env=environment)

    @property
    def producer_options(self) -> dict[str, object]:
        return dict(self.settings.client_options)

    async def start(self) -> None:
        await self.history.open()
        self.sampler.start()

    async def stop(self) -> None:
        await self.sampler.stop()
        await self.history.close()
        await self.admin.close()


class GuardMiddleware(BaseHTTPMiddleware):
    """Before every route: the body's size, the password, the CSRF cookie; security headers after."""

    def __init__(self, app: Any, dashboard: Dashboard, pages: Pages) -> None:
        super().__init__(app)
        self.dashboard = dashboard
        self.pages = pages

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        request.state.new_csrf_cookie = None
        if not request.cookies.get(CSRF_COOKIE):
            request.state.new_csrf_cookie = secrets.token_urlsafe(24)
        length = request.headers.get("content-length", "0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            response = self.pages.error(
                request, 413, "Request too large", f"requests are limited to {MAX_BODY_BYTES // 1024} KiB"
            )
        elif request.url.path not in OPEN_PATHS and not self.dashboard.guard.logged_in(request):
            if request.method == "GET" and not request.url.path.startswith("/api/"):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response = self.pages.render(request, "login.html", status=401, next=target, page="login")
            else:
                response = self.pages.error(request, 401, "Password needed", "log in first")
        else:
            response = await call_next(request)
        if request.state.new_csrf_cookie:
            response.set_cookie(CSRF_COOKIE, request.state.new_csrf_cookie, httponly=True, samesite="strict")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"
        )
        return response


def plotly_js() -> Path:
    """plotly.min.js from the installed `plotly` package."""
    return Path(str(importlib.resources.files("plotly") / "package_data" / "plotly.min.js"))


def create_app(settings: DashboardSettings) -> Starlette:
    dashboard = Dashboard(settings)
    pages = Pages(dashboard)
    static_dir = Path(str(importlib.resources.files("rocketspark.dashboard") / "static"))

    async def vendor_plotly(request: Request) -> Response:
        return FileResponse(plotly_js(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await dashboard.start()
        try:
            yield
        finally:
            await dashboard.stop()

    def handler(status: int, title: str) -> Any:
        async def handle(request: Request, exc: Exception) -> Response:
            return pages.error(request, status, title, str(exc))

        return handle

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        title = "Not found" if exc.status_code == 404 else "Not allowed" if exc.status_code == 405 else "Error"
        return pages.error(request, exc.status_code, title, f"{request.method} {request.url.path}: {exc.detail}")

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("%s %r failed", request.method, request.url.path, exc_info=exc)
        return pages.error(request, 500, "Something went wrong", f"{type(exc).__name__}: {exc}")

    routes = [
        Route("/", pages.cluster),
        Route("/topics", pages.topics),
        Route("/topics", pages.create_topic, methods=["POST"]),
        Route("/topics/{topic}", pages.topic),
        Route("/topics/{topic}/delete", pages.delete_topic, methods=["POST"]),
        Route("/groups", pages.groups),
        Route("/groups/{group}", pages.group),
        Route("/groups/{group}/reset", pages.reset_group, methods=["POST"]),
        Route("/messages", pages.messages),
        Route("/messages/resend", pages.resend, methods=["POST"]),
        Route("/api/cluster/series", pages.cluster_series),
        Route("/api/topics/{topic}/series", pages.topic_series),
        Route("/api/groups/{group}/series", pages.group_series),
        Route("/login", pages.login_form),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/static/vendor/plotly.min.js", vendor_plotly),
        Mount("/static", StaticFiles(directory=static_dir)),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware, dashboard=dashboard, pages=pages)],
        exception_handlers={
            HTTPException: http_error,
            NotFoundError: handler(404, "Not found"),
            BadInputError: handler(400, "Bad input"),
            ActionError: handler(409, "Not done"),
            PermissionError: handler(403, "Refused"),
            NamesrvUnreachableError: handler(503, "Cluster unreachable"),
            RocketMQError: handler(502, "The cluster refused"),
            Exception: unexpected,
        },
        lifespan=lifespan,
    )
    app.state.dashboard = dashboard
    return app
