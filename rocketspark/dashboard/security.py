"""The dashboard's guards: the optional password, CSRF tokens, request size, and signed notices.

- Password (`ROCKETSPARK_DASHBOARD_PASSWORD`): every page but the login form and its style sheet
  needs a session cookie given for the password (or an `Authorization: Basic` header carrying it,
  for scripts); the browser without one gets the login form (401). The cookie is HttpOnly,
  SameSite=Strict, and holds a random id signed with a key drawn at start (a restart logs out).
- CSRF: every browser gets a random `rocketspark_csrf` cookie; every form carries the token
  derived from it with the process's key; a POST whose token does not match, or whose Origin names
  another host, is refused (403) before anything is done.
- Bodies over `MAX_BODY_BYTES` are refused (413) unread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

SESSION_COOKIE = "rocketspark_session"
CSRF_COOKIE = "rocketspark_csrf"
CSRF_FIELD = "csrf"
#: the largest request body taken (the dashboard's forms are a few fields)
MAX_BODY_BYTES = 64 * 1024
#: paths served without the password
OPEN_PATHS = frozenset({"/login", "/static/dashboard.css"})


class Guard:
    def __init__(self, password: str | None) -> None:
        self.password = password or None
        self._key = secrets.token_bytes(32)

    def sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def verify(self, text: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(text), signature)

    # -- password ---------------------------------------------------------------------------------

    def password_matches(self, given: str) -> bool:
        return self.password is not None and hmac.compare_digest(given.encode(), self.password.encode())

    def new_session(self) -> str:
        session = secrets.token_urlsafe(24)
        return f"{session}.{self.sign('session:' + session)}"

    def logged_in(self, request: Request) -> bool:
        if self.password is None:
            return True
        session, _, signature = request.cookies.get(SESSION_COOKIE, "").partition(".")
        if session and self.verify("session:" + session, signature):
            return True
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                _, _, given = base64.b64decode(credentials, validate=True).decode().partition(":")
            except ValueError:
                return False
            return self.password_matches(given)
        return False

    # -- CSRF -------------------------------------------------------------------------------------

    def csrf_token(self, request: Request) -> str:
        """The token the page's forms carry (the browser's cookie is set with the response)."""
        cookie = request.cookies.get(CSRF_COOKIE) or request.state.new_csrf_cookie
        return self.sign("csrf:" + cookie)

    def csrf_refusal(self, request: Request, token: str | None) -> str | None:
        """Why a POST is refused, or None."""
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            return "the form was sent from another site"
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie or not token or not self.verify("csrf:" + cookie, token):
            return "the form's CSRF token is missing or does not match: reload the page and send it again"
        return None


def safe_next(path: str | None) -> str:
    """Where to go after the login: a path of this site only."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


Handler = Callable[[Request], Awaitable[Response]]
