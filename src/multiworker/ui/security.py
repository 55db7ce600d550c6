"""Who may use the dashboard: loopback by default; any other bind address needs the token the
server printed, for every page and API read; every action (POST) needs the token in a header
whatever the bind address, which no cross-site form or script can send.

Also refused: a Host header that is not a loopback name or address when bound to loopback (DNS
rebinding), and a POST whose Origin is another site. Every response carries a Content-Security-Policy
(scripts and connections from this origin only, no frames, no plugins) and ``nosniff``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["Guard", "PAGE_CSP", "TOKEN_HEADER", "TOKEN_COOKIE", "TOKEN_QUERY", "is_loopback", "new_token"]

log = logging.getLogger(__name__)

TOKEN_HEADER = "x-multiworker-token"
TOKEN_COOKIE = "multiworker_token"
TOKEN_QUERY = "token"
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """Whether a bind address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header.split("]")[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware applying the rules above to every HTTP request but static files."""

    def __init__(self, app, *, token: str, remote: bool):
        self.app = app
        self.token = token
        self.remote = remote

    def _ok(self, candidate: str | None) -> bool:
        return bool(candidate) and secrets.compare_digest(candidate.encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = _with_security_headers(send)
        if scope["path"].startswith("/static/"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if not self.remote and not is_loopback(_host_name(host).lower()):
            return await _deny(send, 400, f"unexpected Host header {host!r}: this dashboard answers to "
                                          "a loopback address or localhost only")
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return await _deny(send, 405, f"{method} is not allowed")
        header_token = headers.get(TOKEN_HEADER)
        if method == "POST":
            origin = headers.get("origin")
            if origin and origin != "null" and urlsplit(origin).netloc != host:
                return await _deny(send, 403, f"cross-site request from {origin} refused")
            if not self._ok(header_token):
                return await _deny(send, 403, f"actions need the {TOKEN_HEADER} header (the dashboard's pages "
                                              "send it)")
            return await self.app(scope, receive, send)
        if not self.remote:
            return await self.app(scope, receive, send)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        cookie = SimpleCookie(headers.get("cookie", ""))
        cookie_token = cookie[TOKEN_COOKIE].value if TOKEN_COOKIE in cookie else None
        if self._ok(query.get(TOKEN_QUERY)) and not scope["path"].startswith("/api/"):
            # A page opened from the printed URL: keep the token in a cookie, drop it from the address bar.
            rest = urlencode([(k, v) for k, v in query.items() if k != TOKEN_QUERY])
            # one leading slash: "//evil.com/" would be another site's address
            location = "/" + scope["path"].lstrip("/\\") + (f"?{rest}" if rest else "")
            return await _redirect_with_cookie(send, location, self.token)
        if self._ok(header_token) or self._ok(cookie_token) or self._ok(query.get(TOKEN_QUERY)):
            return await self.app(scope, receive, send)
        return await _deny(send, 401, "this dashboard needs its token: open the URL `multiworker ui` printed "
                                      f"(…?{TOKEN_QUERY}=…) or send the {TOKEN_HEADER} header")


def _with_security_headers(send):
    """``send`` adding the page policy (unless the app set its own) and ``nosniff`` to every response."""
    async def wrapped(message):
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            names = {k.lower() for k, _ in headers}
            if b"content-security-policy" not in names:
                headers.append((b"content-security-policy", PAGE_CSP.encode()))
            if b"x-content-type-options" not in names:
                headers.append((b"x-content-type-options", b"nosniff"))
            message = {**message, "headers": headers}
        await send(message)
    return wrapped


async def _deny(send, status: int, message: str) -> None:
    log.info("refused: %s", message)
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _redirect_with_cookie(send, location: str, token: str) -> None:
    cookie = f"{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode()),
                            (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
