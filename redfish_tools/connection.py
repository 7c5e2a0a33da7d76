"""One authenticated, policy-driven connection to one BMC, on the DMTF ``redfish`` library.

The library's own retries are off (``max_retry=0``); this module adds a bounded retry with backoff for
idempotent requests on 503, ``SWC0700``, timeouts and resets, honours ``Retry-After``, never retries a POST
that may have taken effect, logs in with a session (``X-Auth-Token``, basic auth only when the service has no
SessionService), re-logs in once if the session vanished (iDRAC reset), and always logs out.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redfish
import requests
from pydantic import SecretStr
from redfish.rest.v1 import RetriesExhaustedError

from redfish_tools import errors as E
from redfish_tools.links import link, odata_id
from redfish_tools.secrets import forget_secret, install_log_redaction, register_secret
from redfish_tools.tls import TlsPolicy

log = logging.getLogger("redfish_tools")
install_log_redaction()

#: MessageIds that mean "the iDRAC did not act, ask again later".
NOT_READY_IDS = {"SWC0700", "SRV001", "RAC0508"}
#: MessageId of an exhausted session table.
SESSION_LIMIT_IDS = {"RAC0218"}
SERVICE_ROOT = "/redfish/v1/"


@dataclass(frozen=True)
class BmcTarget:
    """Where a BMC is and how to authenticate to it. ``password`` never shows in repr or logs."""

    name: str
    url: str
    username: str
    password: SecretStr
    ca_file: Path | None = None
    fingerprint: str | None = None
    insecure: bool = False

    @property
    def tls(self) -> TlsPolicy:
        return TlsPolicy(ca_file=self.ca_file, fingerprint=self.fingerprint, insecure=self.insecure)


@dataclass(frozen=True)
class ConnectionPolicy:
    """Timeouts, retries and concurrency for one BMC."""

    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 8.0
    retry_after_max: float = 30.0
    session_retries: int = 3
    max_in_flight: int = 2


@dataclass
class Response:
    """A Redfish answer: status, parsed JSON body and the headers rackctl uses."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def location(self) -> str | None:
        loc = self.headers.get("location")
        return path_of(loc) if loc else None


class Retry(Exception):
    """This attempt failed in a way that may be retried (carries the error to raise when retries run out)."""

    def __init__(self, error: E.RedfishError, delay: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.delay = delay


class BmcConnection:
    """A logged-in connection to one BMC; use as a context manager so the session is always closed.

    At most ``policy.max_in_flight`` requests run at once on it, whatever the number of calling threads.
    """

    def __init__(self, target: BmcTarget, policy: ConnectionPolicy | None = None) -> None:
        self.target = target
        self.policy = policy or ConnectionPolicy()
        self.requests_sent = 0
        self.root: dict[str, Any] = {}
        self.auth_mode: str | None = None
        self._slots = threading.BoundedSemaphore(self.policy.max_in_flight)
        self._count_lock = threading.Lock()
        self._login_lock = threading.Lock()
        self._token: str | None = None
        self._session_uri: str | None = None
        self._sessions_uri = ""
        self._password_registered = False
        self._basic_key: str | None = None
        self._anon: Any = None
        self._client = self._new_client()

    def _new_client(self) -> Any:
        """A DMTF client with this target's TLS policy, explicit timeouts and no library retries."""
        client = redfish.redfish_client(
            base_url=self.target.url,
            username=self.target.username,
            password="",  # never stored in the library object; rackctl sends it itself on login
            check_connectivity=False,
            max_retry=0,
            timeout=(self.policy.connect_timeout, self.policy.read_timeout),
            **self.target.tls.client_kwargs(),
        )
        # BMC traffic never follows *_PROXY/netrc/REQUESTS_CA_BUNDLE from the environment: credentials stay
        # on the OOB network and TLS uses exactly the policy above (also saves scanning os.environ per call).
        client._session.trust_env = False
        return client

    def __repr__(self) -> str:
        return f"BmcConnection(name={self.target.name!r}, url={self.target.url!r}, auth={self.auth_mode!r})"

    # -- lifecycle ------------------------------------------------------------------------------------
    def __enter__(self) -> BmcConnection:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Read the service root and log in (session, or basic auth if there is no SessionService)."""
        self.root = self.get(SERVICE_ROOT, auth=False)
        sessions = link(self.root, "Links", "Sessions")
        if not sessions and "SessionService" in self.root:
            service = self.get(odata_id(self.root["SessionService"]), auth=False, missing_ok=True)
            sessions = link(service or {}, "Sessions")
        self._sessions_uri = sessions
        if sessions:
            self._login_session(sessions)
        else:
            self._login_basic()

    def close(self) -> None:
        """Log out (DELETE the session, retried if the BMC is busy) and drop pooled connections."""
        try:
            if self._session_uri and self._token:
                try:
                    self.request("DELETE", self._session_uri, missing_ok=True, _login=True)
                except E.AuthError:
                    pass  # the session is already gone (expired, or the iDRAC reset)
                except E.RedfishError as exc:
                    log.warning("%s: logout failed: %s", self.target.name, exc.message)
        finally:
            if self._token:
                forget_secret(self._token)
            if self._password_registered:
                forget_secret(self.target.password.get_secret_value())
                self._password_registered = False
            if self._basic_key:
                forget_secret(self._basic_key)
                self._basic_key = None
            self._token = self._session_uri = None
            self._client.set_session_key(None)
            self._client.set_authorization_key(None)
            self._client._session.close()
            if self._anon is not None:
                self._anon._session.close()

    def _password(self) -> str:
        """The password, registered for log redaction while this connection lives."""
        password = self.target.password.get_secret_value()
        if not self._password_registered:
            register_secret(password)
            self._password_registered = True
        return password

    def _login_session(self, sessions_uri: str) -> None:
        password = self._password()
        body = {"UserName": self.target.username, "Password": password}
        attempt = 0
        while True:
            try:
                resp = self.request("POST", sessions_uri, body=body, auth=False, _login=True)
                break
            except E.SessionLimitError as exc:
                attempt += 1
                if attempt > self.policy.session_retries:
                    raise
                time.sleep(self._backoff(attempt, None))
                log.info("%s: %s, retry %d", self.target.name, exc.message_id, attempt)
        token = resp.headers.get("x-auth-token")
        if not token:
            raise E.AuthError(
                "session login answered without an X-Auth-Token",
                bmc=self.target.name,
                uri=sessions_uri,
                status=resp.status,
            )
        register_secret(token)
        self._token = token
        self._session_uri = resp.location or odata_id(resp.body) or None
        self._client.set_session_key(token)
        self.auth_mode = "session"

    def _login_basic(self) -> None:
        password = self._password()
        raw = f"{self.target.username}:{password}".encode()
        key = base64.b64encode(raw).decode()
        register_secret(key)
        self._basic_key = key
        self._client.set_authorization_key(f"Basic {key}")
        self.auth_mode = "basic"

    def _relogin(self, stale_token: str | None) -> None:
        """Log in again after the BMC forgot the session (once per request; threads share the new one)."""
        with self._login_lock:
            if self._token != stale_token or not self._sessions_uri:
                return  # another thread already renewed it
            if self._token:
                forget_secret(self._token)
            self._token = None
            self._login_session(self._sessions_uri)

    # -- requests -------------------------------------------------------------------------------------
    def get(self, uri: str, *, auth: bool = True, missing_ok: bool = False) -> dict[str, Any]:
        """GET a resource and return its JSON body ({} if ``missing_ok`` and it is absent)."""
        resp = self.request("GET", uri, auth=auth, missing_ok=missing_ok)
        return resp.body if resp.status != 404 else {}

    def patch(self, uri: str, body: dict[str, Any]) -> Response:
        """PATCH (retried with the same body: applying it twice has the same effect)."""
        return self.request("PATCH", uri, body=body)

    def post(self, uri: str, body: dict[str, Any] | None = None, *, idempotent: bool = False) -> Response:
        """POST an action. Retried only when the BMC said it did not act, unless ``idempotent``."""
        return self.request("POST", uri, body=body if body is not None else {}, idempotent=idempotent)

    def delete(self, uri: str, *, missing_ok: bool = True) -> Response:
        """DELETE a resource (a 404 counts as done when ``missing_ok``)."""
        return self.request("DELETE", uri, missing_ok=missing_ok)

    def request(
        self,
        method: str,
        uri: str,
        *,
        body: dict[str, Any] | None = None,
        auth: bool = True,
        missing_ok: bool = False,
        idempotent: bool | None = None,
        _login: bool = False,
    ) -> Response:
        """Send one request under the retry policy; raise a typed :class:`RedfishError` on failure."""
        path = path_of(uri)
        safe = idempotent if idempotent is not None else method in ("GET", "HEAD", "PATCH", "PUT", "DELETE")
        relogged = False
        attempt = 0
        while True:
            sent_with = self._token
            try:
                return self._attempt(method, path, body=body, auth=auth, missing_ok=missing_ok, safe=safe)
            except Retry as retry:
                attempt += 1
                if attempt > self.policy.retries:
                    raise retry.error from None
                delay = self._backoff(attempt, retry.delay)
                log.info(
                    "%s %s %s: %s; retry %d in %.1fs",
                    self.target.name,
                    method,
                    path,
                    retry.error.reason,
                    attempt,
                    delay,
                )
                time.sleep(delay)
            except E.AuthError:
                # A session that vanished (iDRAC reset) is renewed once; wrong passwords are never retried.
                if auth and self.auth_mode == "session" and not relogged and not _login:
                    relogged = True
                    self._relogin(sent_with)
                    continue
                raise

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        return backoff_delay(self.policy, attempt, retry_after)

    def _attempt(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None,
        auth: bool,
        missing_ok: bool,
        safe: bool,
    ) -> Response:
        name = self.target.name
        call = getattr(self._client, method.lower())
        kwargs: dict[str, Any] = {"headers": {"Accept": "application/json"}, "max_retry": 0}
        if method in ("POST", "PATCH", "PUT"):
            kwargs["body"] = body if body is not None else {}
        with self._slots:
            with self._count_lock:
                self.requests_sent += 1
            try:
                raw = call(path, **kwargs) if auth else self._unauthenticated(method, path, kwargs)
            except RetriesExhaustedError as exc:
                cause = exc.__cause__
                err = _transport_error(cause, name, path)
                # A connect failure never reached the BMC: safe to retry even for POST.
                never_sent = isinstance(cause, requests.exceptions.ConnectTimeout)
                if (safe or never_sent) and not isinstance(err, E.TLSError):
                    raise Retry(err) from None
                raise err from None
        resp = _to_response(raw)
        log.debug("%s %s %s -> %s", name, method, path, resp.status)
        return classify(resp, bmc=name, path=path, missing_ok=missing_ok, safe=safe)

    def _unauthenticated(self, method: str, path: str, kwargs: dict[str, Any]) -> Any:
        """Send a request without credentials (service root, login) on a separate client, so requests of
        other threads on this connection keep their session meanwhile."""
        if self._anon is None:
            self._anon = self._new_client()
        return getattr(self._anon, method.lower())(path, **kwargs)


def classify(resp: Response, *, bmc: str, path: str, missing_ok: bool, safe: bool) -> Response:
    """Return a successful answer, or raise the typed error for it (``Retry`` when it may be retried).

    Shared by the threaded and the asyncio connections, so both follow one retry policy.
    """
    status = resp.status
    if status < 400:
        return resp
    mid = E.message_id_of(resp.body)
    info = E.extended_info_of(resp.body)
    text = _first_message(resp.body)
    kw = {"bmc": bmc, "uri": path, "status": status, "message_id": mid, "extended_info": info}
    if mid in SESSION_LIMIT_IDS:
        raise E.SessionLimitError(text or "no free session on the BMC", **kw)
    if status == 503 or mid in NOT_READY_IDS:
        err = E.NotReadyError(text or "the BMC is busy or not ready", **kw)
        # A 503 or not-ready answer means the request was not processed: any method may be retried.
        raise Retry(err, _retry_after(resp.headers))
    if status in (401, 403):
        raise E.AuthError("the BMC rejected the credentials" if status == 401 else (text or "access denied"), **kw)
    if status == 404:
        if missing_ok:
            return resp
        raise E.NotFoundError(text or "resource not found", **kw)
    if status >= 500:
        err = E.RedfishError(text or "internal error on the BMC", **kw)
        if safe:
            raise Retry(err, _retry_after(resp.headers))
        raise err
    raise E.InvalidRequestError(text or "the BMC refused the request", **kw)


def backoff_delay(policy: ConnectionPolicy, attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number ``attempt``: ``Retry-After`` (capped) or jittered exponential."""
    if retry_after is not None:
        return min(retry_after, policy.retry_after_max)
    base = min(policy.backoff_max, policy.backoff * (2 ** (attempt - 1)))
    return base * (0.75 + random.random() / 2)  # noqa: S311 - jitter, not security


def _to_response(raw: Any) -> Response:
    try:
        body = raw.dict
    except Exception:  # non-JSON body (HTML error page, empty 202): keep going with {}
        body = {}
    if not isinstance(body, dict):
        body = {"value": body}
    headers = {k.lower(): v for k, v in raw.getheaders()}
    return Response(status=raw.status, body=body, headers=headers)


def _retry_after(headers: dict[str, str]) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _first_message(body: dict[str, Any]) -> str:
    for item in E.extended_info_of(body):
        if item.get("Message"):
            return str(item["Message"])
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    return ""


def _transport_error(cause: BaseException | None, bmc: str, uri: str) -> E.RedfishError:
    if isinstance(cause, requests.exceptions.SSLError):
        text = str(cause)
        hint = "pinned fingerprint does not match" if "ingerprint" in text else "certificate verification failed"
        return E.TLSError(f"TLS: {hint}", bmc=bmc, uri=uri)
    if isinstance(cause, requests.exceptions.Timeout):
        return E.RedfishTimeout("no answer within the timeout", bmc=bmc, uri=uri)
    return E.TransportError(f"cannot reach the BMC ({type(cause).__name__})", bmc=bmc, uri=uri)


def path_of(uri: str) -> str:
    """The path and query of ``uri`` (absolute URLs from Location headers become paths)."""
    parsed = urlparse(uri)
    path = parsed.path or uri
    return f"{path}?{parsed.query}" if parsed.query else path


