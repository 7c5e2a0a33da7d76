"""The one Redfish engine: an authenticated, policy-driven connection to one BMC, on the DMTF library.

Every operation (``power``, ``boot``, ``bios``, ``jobs``, ``lc``, ``scp``, ``firmware``, ``virtual_media``,
``discover``) and the fleet fan-out (:mod:`.fleet`, threads) go through :class:`BmcConnection`, so there is
one retry policy, one re-login rule, one error mapping and one total deadline.

Retry policy (tenacity; the library's own retries are off, ``max_retry=0``):

- GET, HEAD, PUT, PATCH, DELETE are retried on 503, on the iDRAC's not-ready MessageIds (``SWC0700``,
  ``SRV001``, ``RAC0508``), on other 5xx, timeouts and resets, with jittered exponential backoff or the
  BMC's ``Retry-After``: doing them twice has the effect of doing them once.
- A POST is retried only where that is provably safe:
  (1) the connection was never established (connect error or connect timeout: the request never left);
  (2) the caller marked the action idempotent by nature (``post(..., idempotent=True)``: clearing the job
  queue, reading the LC status), where a second delivery changes nothing;
  (3) the session login answered 503/not-ready: the iDRAC's web front answers those before the request
  reaches its session manager and returns no token, so no usable session exists; a session it might still
  have made would expire after the BMC's ``SessionTimeout``.
  Any other POST (power, reset, job creation, SCP, firmware) is sent once: a 503 or a lost answer is
  reported (a dropped answer as :class:`~redfish_tools.errors.AnswerLost`, a timeout as
  :class:`~redfish_tools.errors.RedfishTimeout`, both saying so), because the action may have taken effect;
  the operations read the state back on their next run instead of repeating blindly.
- A PATCH whose answer was lost is sent again: the same body twice stages the same values. Where the BMC
  refuses the second one because the first created a job (BIOS ``SYS011``), the operation reads back the
  staged values and the job instead of failing (:func:`redfish_tools.bios.apply_bios`).
- 401 on an established session means the session expired (an iDRAC reset): log in once more, and delete
  the old session when the BMC still knows it. A wrong password at login is never retried (lockout).
- 403 is a permissions error (:class:`~redfish_tools.errors.PermissionDeniedError`), never a re-login.
- ``RAC0218`` (no free session, iDRAC allows 8) falls back to basic auth, which the iDRAC accepts on every
  resource and which holds no session.

Deadlines: ``request_deadline_s`` bounds one request with its retries and backoff, ``deadline_s`` (when set)
one operation from login to the end; both are enforced on the socket by :mod:`.deadline` (a BMC trickling
bytes is cut at the deadline, not when its reads stop).

Cancellation (Ctrl-C in a fleet run): a connection made with a ``cancel`` event sends no new request once
it is set (:class:`~redfish_tools.errors.Cancelled`, also out of a retry's backoff), and its requests in
flight are cut at once by :func:`redfish_tools.deadline.interrupt`; only the clean-up (logout, deleting a
lost login's session) still runs, within ``CANCEL_CLEANUP_S``.

Sessions never leak on the paths Python can run: logout in ``close()`` on success, on exceptions and on
``KeyboardInterrupt``; a login POST whose answer was lost (read timeout, deadline, Ctrl-C while waiting)
is followed by finding the session it created (the newest session of our user name, listed with basic
auth) and deleting it. What cannot be caught: SIGKILL or a power loss of this host, and a second Ctrl-C
during that clean-up; such a session expires after the BMC's ``SessionTimeout`` (30 min on an iDRAC),
unless ``policy.session_ledger`` is set: then the next login to that BMC closes it (:mod:`.session_ledger`).
"""

from __future__ import annotations

import base64
import dataclasses
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
import tenacity
from pydantic import SecretStr
from redfish.rest.v1 import RetriesExhaustedError

from redfish_tools import errors as E
from redfish_tools import session_ledger
from redfish_tools.deadline import DeadlineAdapter, bounded
from redfish_tools.links import link, member_uris, odata_id
from redfish_tools.secrets import forget_secret, install_log_redaction, register_secret
from redfish_tools.tls import TlsPolicy, explain_failure

log = logging.getLogger("redfish_tools")
install_log_redaction()

#: MessageIds that mean "the iDRAC did not act, ask again later".
NOT_READY_IDS = {"SWC0700", "SRV001", "RAC0508"}
#: MessageId of an exhausted session table.
SESSION_LIMIT_IDS = {"RAC0218"}
SERVICE_ROOT = "/redfish/v1/"
#: Methods whose repetition has the effect of one delivery.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PATCH", "PUT", "DELETE"})
#: Seconds the clean-up (logout) of a cancelled connection may take at most.
CANCEL_CLEANUP_S = 5.0


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
    """Timeouts, retries, deadlines and concurrency for one BMC.

    ``connect_timeout``/``read_timeout`` bound one connect and one socket read; ``request_deadline_s`` bounds
    one request in total (its retries, backoff and however slowly the answer trickles in); ``deadline_s``,
    when set, bounds one operation (login, the operation's requests, not the logout, which gets
    ``logout_deadline_s`` of its own so a late operation still closes its session).
    """

    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 8.0
    retry_after_max: float = 30.0
    request_deadline_s: float = 90.0
    deadline_s: float | None = None
    logout_deadline_s: float = 10.0
    max_in_flight: int = 2
    #: Directory of the session ledger (:mod:`.session_ledger`): sessions opened and not yet closed are
    #: recorded there, and the next login to a BMC closes those a killed run left behind. None: no ledger.
    session_ledger: Path | None = None


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


@dataclass(frozen=True)
class _Call:
    """One request as the retry loop sees it."""

    method: str
    path: str
    body: dict[str, Any] | None
    auth: bool
    missing_ok: bool
    safe: bool
    retry_not_ready: bool
    deadline: float
    headers: dict[str, str] | None
    cleanup: bool = False


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

    def __init__(
        self, target: BmcTarget, policy: ConnectionPolicy | None = None, *, cancel: threading.Event | None = None
    ) -> None:
        self.target = target
        self.policy = policy or ConnectionPolicy()
        self.cancel = cancel
        self.requests_sent = 0
        self.root: dict[str, Any] = {}
        self.auth_mode: str | None = None
        self.deadline: float | None = None
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
        client._session.mount("http://", DeadlineAdapter())  # the https adapter comes from the TLS policy
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

    def start_deadline(self, seconds: float | None = None) -> None:
        """Start the operation deadline now (``seconds``, else ``policy.deadline_s``; None: none)."""
        seconds = seconds if seconds is not None else self.policy.deadline_s
        self.deadline = time.monotonic() + seconds if seconds is not None else None

    @property
    def deadline_passed(self) -> bool:
        """Whether the operation deadline (if any) is spent: waiting loops stop then."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def open(self) -> None:
        """Read the service root and log in (session; basic auth without a SessionService or on RAC0218)."""
        if self.deadline is None:
            self.start_deadline()
        self.root = self.get(SERVICE_ROOT, auth=False)
        sessions = link(self.root, "Links", "Sessions")
        if not sessions and "SessionService" in self.root:
            service = self.get(odata_id(self.root["SessionService"]), auth=False, missing_ok=True)
            sessions = link(service or {}, "Sessions")
        self._sessions_uri = sessions
        if sessions:
            self.close_stale_sessions()
            self._login_session(sessions)
        else:
            self._login_basic()

    def close(self) -> None:
        """Log out (DELETE the session, within ``logout_deadline_s``) and drop pooled connections."""
        try:
            if self._session_uri and self._token and self._delete_session(self._session_uri, "logout"):
                self._forget_in_ledger(self._session_uri)
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

    @property
    def cancelled(self) -> bool:
        """Whether this connection's cancel event is set (Ctrl-C): only clean-up requests are sent then."""
        return self.cancel is not None and self.cancel.is_set()

    def _cleanup_deadline(self) -> float:
        seconds = self.policy.logout_deadline_s
        return time.monotonic() + (min(seconds, CANCEL_CLEANUP_S) if self.cancelled else seconds)

    def _delete_session(
        self, uri: str, what: str, headers: dict[str, str] | None = None, *, unauthorized_is_gone: bool = True
    ) -> bool:
        """DELETE a session; True when it is gone (deleted, 404, or a 401 on its own token)."""
        deadline = self._cleanup_deadline()
        try:
            self.request(
                "DELETE", uri, missing_ok=True, _login=True, _deadline=deadline, _headers=headers, _cleanup=True
            )
        except E.AuthError as exc:
            if unauthorized_is_gone:
                return True  # the session is already gone (expired, or the iDRAC reset)
            log.warning("%s: %s failed: %s", self.target.name, what, exc.message)
            return False
        except E.RedfishError as exc:
            log.warning("%s: %s failed: %s", self.target.name, what, exc.message)
            return False
        return True

    def close_stale_sessions(self) -> int:
        """Delete (basic auth) the sessions the ledger lists for this BMC whose process is gone (a run that
        was killed); return how many are closed now. Entries whose DELETE failed stay for the next run."""
        ledger = self.policy.session_ledger
        if ledger is None:
            return 0
        try:
            entries = session_ledger.stale_entries(ledger, self.target.url)
        except OSError as exc:
            log.warning("%s: cannot read the session ledger %s: %s", self.target.name, ledger, exc)
            return 0
        closed = 0
        for entry in entries:
            what = "closing a session left open by an earlier run"
            if self._delete_session(entry.uri, what, headers=self._basic_header(), unauthorized_is_gone=False):
                entry.path.unlink(missing_ok=True)
                closed += 1
        if closed:
            log.warning("%s: closed %d session(s) left open by an earlier run that was killed", self.target.name,
                        closed)  # fmt: skip
        return closed

    def _record_in_ledger(self, uri: str) -> None:
        if self.policy.session_ledger is None:
            return
        try:
            session_ledger.record(self.policy.session_ledger, self.target.url, uri, self.target.username)
        except OSError as exc:
            log.warning("%s: cannot record the session in the ledger: %s", self.target.name, exc)

    def _forget_in_ledger(self, uri: str) -> None:
        if self.policy.session_ledger is None:
            return
        try:
            session_ledger.forget(self.policy.session_ledger, self.target.url, uri)
        except OSError as exc:
            log.warning("%s: cannot update the session ledger: %s", self.target.name, exc)

    def _password(self) -> str:
        """The password, registered for log redaction while this connection lives."""
        password = self.target.password.get_secret_value()
        if not self._password_registered:
            register_secret(password)
            self._password_registered = True
        return password

    def _login_session(self, sessions_uri: str) -> None:
        body = {"UserName": self.target.username, "Password": self._password()}
        try:
            resp = self.request("POST", sessions_uri, body=body, auth=False, idempotent=False, _login=True)
        except E.SessionLimitError as exc:
            log.info("%s: %s (no free session): using basic auth", self.target.name, exc.message_id)
            self._login_basic()
            return
        except (E.TLSError, E.AuthError, E.InvalidRequestError, E.NotReadyError, E.NotFoundError):
            raise  # the BMC answered (or never got it): no session was made
        except E.Cancelled as exc:
            if exc.sent:  # cut while the BMC may have been making the session
                self._reap_lost_session(sessions_uri)
            raise
        except BaseException:
            # The answer was lost (timeout, deadline, reset, Ctrl-C): the BMC may hold a session for us.
            self._reap_lost_session(sessions_uri)
            raise
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
        if self._session_uri:
            self._record_in_ledger(self._session_uri)
        self._client.set_session_key(token)
        self.auth_mode = "session"

    def _basic_header(self) -> dict[str, str]:
        if self._basic_key is None:
            key = base64.b64encode(f"{self.target.username}:{self._password()}".encode()).decode()
            register_secret(key)
            self._basic_key = key
        return {"Authorization": f"Basic {self._basic_key}"}

    def _login_basic(self) -> None:
        self._client.set_authorization_key(self._basic_header()["Authorization"])
        self.auth_mode = "basic"

    def _reap_lost_session(self, sessions_uri: str) -> None:
        """Delete the session a login POST made when its answer never reached us.

        The session's id is unknown, so: list the sessions with basic auth and delete the newest one of our
        user name (iDRAC session ids increase). Tried twice, half a second apart, within
        ``logout_deadline_s``. Limit of the heuristic: the emulated and real iDRAC list no creation time or
        client tag, so when our POST made no session (it never arrived) or another client of the same user
        logged in meanwhile, that other session is the newest and is deleted (its client must log in
        again); a leaked session, which locks operators out at 8, is the worse outcome.
        """
        basic = self._basic_header()
        deadline = self._cleanup_deadline()
        for attempt in range(2):
            try:

                def get(uri: str) -> dict[str, Any]:
                    return self.request("GET", uri, auth=False, _deadline=deadline, _headers=basic, _cleanup=True).body

                mine = []
                for uri in member_uris(get, sessions_uri):
                    session = get(uri)
                    if session.get("UserName") == self.target.username:
                        mine.append((_id_order(session, uri), uri))
                if mine:
                    newest = max(mine)[1]
                    log.info("%s: deleting the session of a login whose answer was lost", self.target.name)
                    self._delete_session(newest, "clean-up of a lost login", headers=basic)
                    return
            except E.RedfishError as exc:
                log.warning("%s: cannot look for a lost login session: %s", self.target.name, exc.message)
                return
            if attempt == 0:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _relogin(self, stale_token: str | None) -> None:
        """Log in again after the BMC forgot the session (once per request; threads share the new one);
        the old session is deleted if the BMC still lists it."""
        with self._login_lock:
            if self._token != stale_token or not self._sessions_uri:
                return  # another thread already renewed it
            old_uri = self._session_uri
            if self._token:
                forget_secret(self._token)
            self._token = self._session_uri = None
            self._client.set_session_key(None)
            self._login_session(self._sessions_uri)
            stale = old_uri if old_uri and old_uri != self._session_uri and self.auth_mode == "session" else None
            if stale and self._delete_session(stale, "deleting the expired session"):
                self._forget_in_ledger(stale)

    # -- requests -------------------------------------------------------------------------------------
    def get(self, uri: str, *, auth: bool = True, missing_ok: bool = False) -> dict[str, Any]:
        """GET a resource and return its JSON body ({} if ``missing_ok`` and it is absent)."""
        resp = self.request("GET", uri, auth=auth, missing_ok=missing_ok)
        return resp.body if resp.status != 404 else {}

    def member_uris(self, collection_uri: str) -> list[str]:
        """URIs of a collection's members, following ``Members@odata.nextLink`` pages."""
        return member_uris(self.get, collection_uri)

    def patch(self, uri: str, body: dict[str, Any]) -> Response:
        """PATCH (retried with the same body: applying it twice has the same effect)."""
        return self.request("PATCH", uri, body=body)

    def post(self, uri: str, body: dict[str, Any] | None = None, *, idempotent: bool = False) -> Response:
        """POST an action: sent once unless ``idempotent`` (see the module docstring for why)."""
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
        _deadline: float | None = None,
        _headers: dict[str, str] | None = None,
        _cleanup: bool = False,
    ) -> Response:
        """Send one request under the policy; raise a typed :class:`~redfish_tools.errors.RedfishError`.

        ``_cleanup`` marks the logout and lost-session clean-up: still sent after a cancel."""
        path = path_of(uri)
        safe = idempotent if idempotent is not None else method in IDEMPOTENT_METHODS
        # A login answered 503/not-ready is retried (reason 3 in the module docstring).
        retry_not_ready = safe or (_login and method == "POST")
        deadline = _deadline if _deadline is not None else self._request_deadline()
        relogged = False
        while True:
            sent_with = self._token
            try:
                return self._with_retries(
                    _Call(method, path, body, auth, missing_ok, safe, retry_not_ready, deadline, _headers, _cleanup)
                )
            except E.AuthError:
                # An expired session (iDRAC reset) is renewed once; wrong passwords are never retried.
                if auth and self.auth_mode == "session" and not relogged and not _login:
                    relogged = True
                    self._relogin(sent_with)
                    continue
                raise

    def _request_deadline(self) -> float:
        own = time.monotonic() + self.policy.request_deadline_s
        return min(own, self.deadline) if self.deadline is not None else own

    def _with_retries(self, call: _Call) -> Response:
        policy = self.policy
        deadline = call.deadline

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            delay = backoff_delay(policy, state.attempt_number, getattr(exc, "delay", None))
            return max(0.0, min(delay, deadline - time.monotonic()))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            reason = exc.error.reason if isinstance(exc, Retry) else str(exc)
            sleep = state.next_action.sleep if state.next_action else 0.0
            log.info("%s %s %s: %s; retry %d in %.1fs", self.target.name, call.method, call.path, reason,
                     state.attempt_number, sleep)  # fmt: skip

        cancel = None if call.cleanup else self.cancel

        def sleep(seconds: float) -> None:  # a backoff ends at once on cancel (the next attempt raises)
            if cancel is not None:
                cancel.wait(seconds)
            else:
                time.sleep(seconds)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(Retry),
            stop=tenacity.stop_after_attempt(policy.retries + 1) | _deadline_passed(deadline),
            wait=wait,
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(self._attempt, call)
        except Retry as retry:
            if time.monotonic() >= deadline:
                raise self._deadline_error(call.path, deadline, retry.error.reason) from None
            raise retry.error from None

    def _deadline_error(self, path: str, deadline: float, cause: str = "") -> E.DeadlineExceeded:
        seconds = self.policy.request_deadline_s
        if self.deadline is not None and deadline >= self.deadline - 1e-6 and self.policy.deadline_s is not None:
            seconds = self.policy.deadline_s
        last = f" (last: {cause})" if cause else ""
        return E.DeadlineExceeded(f"deadline exceeded after {seconds:g} s{last}", bmc=self.target.name, uri=path)

    def _cancelled_error(self, path: str, *, sent: bool) -> E.Cancelled:
        what = "cut while waiting for the answer" if sent else "not sent"
        return E.Cancelled(f"interrupted (Ctrl-C): request {what}", bmc=self.target.name, uri=path, sent=sent)

    def _attempt(self, call: _Call) -> Response:
        name, method, path, deadline, body = self.target.name, call.method, call.path, call.deadline, call.body
        cancel = None if call.cleanup else self.cancel
        if cancel is not None and cancel.is_set():
            raise self._cancelled_error(path, sent=False)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._slots.acquire(timeout=remaining):
            raise self._deadline_error(path, deadline)
        try:
            # Before any login the main client carries no credentials: the service root and the login use
            # it (one TLS connection fewer per BMC); later unauthenticated calls (re-login) use their own.
            client = self._client if call.auth or self.auth_mode is None else self._anonymous()
            kwargs: dict[str, Any] = {
                "headers": {"Accept": "application/json", **(call.headers or {})},
                "max_retry": 0,
                "timeout": (
                    max(0.01, min(self.policy.connect_timeout, remaining)),
                    max(0.01, min(self.policy.read_timeout, remaining)),
                ),
            }
            if method in ("POST", "PATCH", "PUT"):
                kwargs["body"] = body if body is not None else {}
            with self._count_lock:
                self.requests_sent += 1
            with bounded(deadline, cancel) as slot:
                try:
                    raw = getattr(client, method.lower())(path, **kwargs)
                except RetriesExhaustedError as exc:
                    if slot.cancelled:
                        raise self._cancelled_error(path, sent=True) from None
                    if slot.expired:
                        raise self._deadline_error(path, deadline) from None
                    cause = exc.__cause__
                    err = _transport_error(cause, name, path, self.target)
                    # A connect failure never reached the BMC: safe to retry even for POST.
                    never_sent = isinstance(cause, requests.exceptions.ConnectTimeout) or (
                        isinstance(cause, requests.exceptions.ConnectionError) and "NewConnectionError" in repr(cause)
                    )
                    if (call.safe or never_sent) and not isinstance(err, E.TLSError):
                        raise Retry(err) from None
                    if not isinstance(err, E.TLSError):  # sent, no answer: the BMC may have acted
                        # A timeout stays a RedfishTimeout; a dropped connection is AnswerLost.
                        lost = type(err) if isinstance(err, E.RedfishTimeout) else E.AnswerLost
                        raise lost(
                            f"{err.reason}: the BMC may have carried out this {method}, so it was not sent "
                            "again; check the BMC's state before repeating it",
                            bmc=name,
                            uri=path,
                        ) from None
                    raise err from None
                except Exception:
                    if slot.cancelled:
                        raise self._cancelled_error(path, sent=True) from None
                    if slot.expired:
                        raise self._deadline_error(path, deadline) from None
                    raise
            if slot.expired:
                raise self._deadline_error(path, deadline)
        finally:
            self._slots.release()
        resp = _to_response(raw)
        log.debug("%s %s %s -> %s", name, method, path, resp.status)
        return classify(
            resp, bmc=name, path=path, missing_ok=call.missing_ok, safe=call.safe, retry_not_ready=call.retry_not_ready
        )

    def _anonymous(self) -> Any:
        """The client for requests without the session (service root, login, clean-up with explicit
        basic auth): separate, so requests of other threads keep their session meanwhile."""
        if self._anon is None:
            self._anon = self._new_client()
        return self._anon


def close_stale_sessions(target: BmcTarget, ledger: Path, policy: ConnectionPolicy | None = None) -> int:
    """Close the sessions a killed run left open on ``target`` (as recorded in ``ledger``), without logging
    in; return how many were closed. :meth:`BmcConnection.open` does this itself when the policy has a ledger.
    """
    policy = dataclasses.replace(policy or ConnectionPolicy(), session_ledger=ledger)
    conn = BmcConnection(target, policy)
    try:
        return conn.close_stale_sessions()
    finally:
        conn.close()


def _deadline_passed(deadline: float) -> tenacity.stop.stop_base:
    class _Stop(tenacity.stop.stop_base):
        def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
            return time.monotonic() >= deadline

    return _Stop()


def _id_order(session: dict[str, Any], uri: str) -> tuple[int, str]:
    """Sort key for session ids: numeric when they are numbers (iDRAC), else the text."""
    sid = str(session.get("Id") or uri.rstrip("/").rsplit("/", 1)[-1])
    return (int(sid), sid) if sid.isdigit() else (-1, sid)


def classify(
    resp: Response, *, bmc: str, path: str, missing_ok: bool, safe: bool, retry_not_ready: bool | None = None
) -> Response:
    """Return a successful answer, or raise the typed error for it (``Retry`` when it may be retried).

    ``safe``: the request may be repeated on any transient failure; ``retry_not_ready``: on 503/not-ready
    answers only (defaults to ``safe``).
    """
    retry_not_ready = safe if retry_not_ready is None else retry_not_ready
    status = resp.status
    if status < 400:
        return resp
    mid = E.message_id_of(resp.body)
    info = E.extended_info_of(resp.body)
    text = _first_message(resp.body)
    kw: E.ErrorContext = {"bmc": bmc, "uri": path, "status": status, "message_id": mid, "extended_info": info}
    if mid in SESSION_LIMIT_IDS:
        raise E.SessionLimitError(text or "no free session on the BMC", **kw)
    err: E.RedfishError
    if status == 503 or mid in NOT_READY_IDS:
        err = E.NotReadyError(text or "the BMC is busy or not ready", **kw)
        if retry_not_ready:
            raise Retry(err, _retry_after(resp.headers))
        raise err
    if status == 401:
        raise E.AuthError("the BMC rejected the credentials", **kw)
    if status == 403:
        raise E.PermissionDeniedError(text or "the account is not allowed to do this", **kw)
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


def _transport_error(cause: BaseException | None, bmc: str, uri: str, target: BmcTarget) -> E.RedfishError:
    if isinstance(cause, requests.exceptions.SSLError):
        failure = explain_failure(cause, host=urlparse(target.url).hostname or target.url, policy=target.tls)
        return E.TLSError(failure.text(), bmc=bmc, uri=uri, problem=failure.problem)
    if isinstance(cause, requests.exceptions.Timeout):
        return E.RedfishTimeout("no answer within the timeout", bmc=bmc, uri=uri)
    return E.TransportError(f"cannot reach the BMC ({type(cause).__name__})", bmc=bmc, uri=uri)


def path_of(uri: str) -> str:
    """The path and query of ``uri`` (absolute URLs from Location headers become paths)."""
    parsed = urlparse(uri)
    path = parsed.path or uri
    return f"{path}?{parsed.query}" if parsed.query else path
