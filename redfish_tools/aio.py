"""asyncio transport for large fleets: the same retry policy, sessions, TLS and typed errors as
:mod:`redfish_tools.connection`, on the DMTF library's ``redfish.aio.AsyncRedfishClient`` (aiohttp).

One event loop serves every BMC with a fraction of the CPU per request that a thread per BMC costs, which
is what lets one head node crawl hundreds of iDRACs at their own pace. Read-only discovery uses it
(:func:`discover_async`, :func:`run_fleet_async`); configuration operations stay on the threaded path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
from redfish.aio import AsyncRedfishClient, RedfishConnectionError, RedfishTimeoutError

from redfish_tools import errors as E
from redfish_tools.connection import (
    SERVICE_ROOT,
    BmcTarget,
    ConnectionPolicy,
    Response,
    Retry,
    backoff_delay,
    classify,
    path_of,
)
from redfish_tools.discover import NodeFacts, RawInventory, facts_from
from redfish_tools.fleet import DEFAULT_MAX_BMCS, NodeResult, Progress
from redfish_tools.resources import link, odata_id
from redfish_tools.secrets import forget_secret, redact, register_secret
from redfish_tools.tls import normalise_fingerprint

T = TypeVar("T")
log = logging.getLogger("redfish_tools.aio")


def ssl_for(target: BmcTarget) -> ssl.SSLContext | aiohttp.Fingerprint | bool:
    """aiohttp's ``ssl`` argument for a target: pinned fingerprint, CA bundle, system store, or off."""
    if target.fingerprint:
        return aiohttp.Fingerprint(bytes.fromhex(normalise_fingerprint(target.fingerprint)))
    if target.insecure:
        return False
    return _verifying_context(str(target.ca_file) if target.ca_file else None)


@functools.lru_cache(maxsize=64)
def _verifying_context(cafile: str | None) -> ssl.SSLContext:
    """One verifying context per CA bundle, shared by every BMC it signs (loading it costs ~1 ms)."""
    return ssl.create_default_context(cafile=cafile)


class AsyncBmcConnection:
    """A logged-in asyncio connection to one BMC (``async with``); at most ``max_in_flight`` requests."""

    def __init__(self, target: BmcTarget, policy: ConnectionPolicy | None = None) -> None:
        self.target = target
        self.policy = policy or ConnectionPolicy()
        self.requests_sent = 0
        self.root: dict[str, Any] = {}
        self.auth_mode: str | None = None
        self._slots = asyncio.Semaphore(self.policy.max_in_flight)
        self._login_lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None
        self._anon: AsyncRedfishClient | None = None
        self._client: AsyncRedfishClient | None = None
        self._token: str | None = None
        self._session_uri: str | None = None
        self._sessions_uri = ""

    def __repr__(self) -> str:
        return f"AsyncBmcConnection(name={self.target.name!r}, url={self.target.url!r})"

    async def __aenter__(self) -> AsyncBmcConnection:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.policy.connect_timeout, sock_read=self.policy.read_timeout
        )
        connector = aiohttp.TCPConnector(ssl=ssl_for(self.target), limit=self.policy.max_in_flight)
        self._http = aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)
        self._anon = AsyncRedfishClient(self.target.url, session=self._http)
        register_secret(self.target.password.get_secret_value())
        try:
            await self.open()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Read the service root and log in with a session."""
        self.root = await self.get(SERVICE_ROOT, auth=False)
        self._sessions_uri = link(self.root, "Links", "Sessions")
        if not self._sessions_uri:
            raise E.NotFoundError(
                "no SessionService sessions link (the async path does not use basic auth)",
                bmc=self.target.name,
                uri=SERVICE_ROOT,
            )
        await self._login()

    async def _login(self) -> None:
        body = {"UserName": self.target.username, "Password": self.target.password.get_secret_value()}
        attempt = 0
        while True:
            try:
                resp = await self.request("POST", self._sessions_uri, body=body, auth=False, relogin=False)
                break
            except E.SessionLimitError:
                attempt += 1
                if attempt > self.policy.session_retries:
                    raise
                await asyncio.sleep(backoff_delay(self.policy, attempt, None))
        token = resp.headers.get("x-auth-token")
        if not token:
            raise E.AuthError("session login answered without an X-Auth-Token", bmc=self.target.name,
                              uri=self._sessions_uri, status=resp.status)  # fmt: skip
        register_secret(token)
        self._token = token
        self._session_uri = resp.location or odata_id(resp.body) or None
        self._client = AsyncRedfishClient(
            self.target.url, session=self._http, session_key=token, session_location=self._session_uri
        )
        self.auth_mode = "session"

    async def close(self) -> None:
        """Log out (a session the BMC already forgot counts as logged out) and close the sockets."""
        try:
            if self._session_uri and self._token:
                try:
                    await self.request("DELETE", self._session_uri, missing_ok=True, relogin=False)
                except E.AuthError:
                    pass
                except E.RedfishError as exc:
                    log.warning("%s: logout failed: %s", self.target.name, exc.message)
        finally:
            if self._token:
                forget_secret(self._token)
            forget_secret(self.target.password.get_secret_value())
            self._token = self._session_uri = None
            self._client = None
            if self._http is not None:
                await self._http.close()
                self._http = None

    async def get(self, uri: str, *, auth: bool = True, missing_ok: bool = False) -> dict[str, Any]:
        """GET a resource's JSON body ({} if ``missing_ok`` and absent)."""
        resp = await self.request("GET", uri, auth=auth, missing_ok=missing_ok)
        return resp.body if resp.status != 404 else {}

    async def request(
        self,
        method: str,
        uri: str,
        *,
        body: dict[str, Any] | None = None,
        auth: bool = True,
        missing_ok: bool = False,
        idempotent: bool | None = None,
        relogin: bool = True,
    ) -> Response:
        """One request under the shared retry policy (see :func:`redfish_tools.connection.classify`)."""
        path = path_of(uri)
        safe = idempotent if idempotent is not None else method in ("GET", "HEAD", "PATCH", "PUT", "DELETE")
        relogged = not relogin
        attempt = 0
        while True:
            sent_with = self._token
            try:
                return await self._attempt(method, path, body=body, auth=auth, missing_ok=missing_ok, safe=safe)
            except Retry as retry:
                attempt += 1
                if attempt > self.policy.retries:
                    raise retry.error from None
                await asyncio.sleep(backoff_delay(self.policy, attempt, retry.delay))
            except E.AuthError:
                if auth and not relogged:
                    relogged = True
                    async with self._login_lock:
                        if self._token == sent_with:
                            await self._login()
                    continue
                raise

    async def _attempt(
        self, method: str, path: str, *, body: dict[str, Any] | None, auth: bool, missing_ok: bool, safe: bool
    ) -> Response:
        client = self._client if auth else self._anon
        assert client is not None, "connection not open"
        kwargs: dict[str, Any] = {"headers": {"Accept": "application/json"}}
        if method in ("POST", "PATCH", "PUT"):
            kwargs["body"] = body if body is not None else {}
        async with self._slots:
            self.requests_sent += 1
            try:
                raw = await getattr(client, method.lower())(path, **kwargs)
            except (RedfishTimeoutError, RedfishConnectionError) as exc:
                err, never_sent = _transport_error(exc.__cause__, self.target.name, path)
                if (safe or never_sent) and not isinstance(err, E.TLSError):
                    raise Retry(err) from None
                raise err from None
        try:
            parsed = raw.dict
        except Exception:  # non-JSON body
            parsed = {}
        headers = {k.lower(): v for k, v in raw.getheaders()}
        resp = Response(status=raw.status, body=parsed if isinstance(parsed, dict) else {}, headers=headers)
        return classify(resp, bmc=self.target.name, path=path, missing_ok=missing_ok, safe=safe)


def _transport_error(cause: BaseException | None, bmc: str, uri: str) -> tuple[E.RedfishError, bool]:
    """(typed error, whether the request surely never reached the BMC)."""
    if isinstance(cause, aiohttp.ServerFingerprintMismatch):
        return E.TLSError("TLS: pinned fingerprint does not match", bmc=bmc, uri=uri), True
    if isinstance(cause, aiohttp.ClientSSLError | ssl.SSLError):
        return E.TLSError("TLS: certificate verification failed", bmc=bmc, uri=uri), True
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return E.RedfishTimeout("no connection within the timeout", bmc=bmc, uri=uri), True
    if isinstance(cause, asyncio.TimeoutError | aiohttp.ServerTimeoutError) or cause is None:
        return E.RedfishTimeout("no answer within the timeout", bmc=bmc, uri=uri), False
    never = isinstance(cause, aiohttp.ClientConnectorError)
    return E.TransportError(f"cannot reach the BMC ({type(cause).__name__})", bmc=bmc, uri=uri), never


class AsyncService:
    """Link navigation for :class:`AsyncBmcConnection` (same rules as :class:`resources.Service`)."""

    def __init__(self, conn: AsyncBmcConnection) -> None:
        self.conn = conn
        self._cache: dict[str, dict[str, Any]] = {}

    @property
    def root(self) -> dict[str, Any]:
        return self.conn.root

    async def get(self, uri: str) -> dict[str, Any]:
        if uri not in self._cache:
            self._cache[uri] = await self.conn.get(uri)
        return self._cache[uri]

    @property
    def supports_expand(self) -> bool:
        feats = self.root.get("ProtocolFeaturesSupported", {}).get("ExpandQuery", {})
        return bool(feats.get("ExpandAll") or feats.get("NoLinks") or feats.get("Levels"))

    async def members(self, collection_uri: str) -> list[dict[str, Any]]:
        if not collection_uri:
            return []
        if self.supports_expand:
            body = await self.get(f"{collection_uri}?$expand=.($levels=1)")
            items = body.get("Members", [])
            if items and all(isinstance(m, dict) and len(m) > 1 for m in items):
                return items
        body = await self.get(collection_uri)
        uris = [odata_id(m) for m in body.get("Members", []) if odata_id(m)]
        return list(await asyncio.gather(*(self.get(u) for u in uris)))

    async def pick(self, key: str, preferred: str) -> str:
        coll = link(self.root, key)
        if not coll:
            raise E.NotFoundError(f"the service root has no {key} link", bmc=self.conn.target.name, uri="/redfish/v1/")
        uris = [odata_id(m) for m in (await self.get(coll)).get("Members", [])]
        if not uris:
            raise E.NotFoundError(f"{key} is empty", bmc=self.conn.target.name, uri=coll)
        return next((u for u in uris if u.rstrip("/").endswith(preferred)), uris[0])


async def fetch_async(svc: AsyncService) -> RawInventory:
    """The async twin of :func:`redfish_tools.discover.fetch`: independent reads run two at a time."""
    system = await svc.get(await svc.pick("Systems", "System.Embedded.1"))
    raw = RawInventory(root=svc.root, system=system)

    async def storage() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        out = []
        for ctrl in await svc.members(link(system, "Storage")):
            refs = ctrl.get("Drives", [])
            drives = await asyncio.gather(*(svc.get(odata_id(r)) if len(r) == 1 else _same(r) for r in refs))
            out.append((ctrl, list(drives)))
        return out

    async def pcie() -> list[dict[str, Any]]:
        chassis_links = system.get("Links", {}).get("Chassis") or []
        chassis_uri = odata_id(chassis_links[0]) if chassis_links else await svc.pick("Chassis", "System.Embedded.1")
        chassis = await svc.get(chassis_uri)
        return await svc.members(link(chassis, "PCIeDevices"))

    async def manager() -> dict[str, Any]:
        return await svc.get(await svc.pick("Managers", "iDRAC.Embedded.1"))

    async def firmware() -> list[dict[str, Any]]:
        update = link(svc.root, "UpdateService")
        return await svc.members(link(await svc.get(update), "FirmwareInventory")) if update else []

    (
        raw.processors,
        raw.memory,
        raw.nics,
        raw.storage,
        raw.pcie_devices,
        raw.manager,
        raw.firmware,
    ) = await asyncio.gather(
        svc.members(link(system, "Processors")),
        svc.members(link(system, "Memory")),
        svc.members(link(system, "EthernetInterfaces")),
        storage(),
        pcie(),
        manager(),
        firmware(),
    )
    return raw


async def _same(value: dict[str, Any]) -> dict[str, Any]:
    return value


async def discover_async(conn: AsyncBmcConnection) -> NodeFacts:
    """Discover one node over an async connection (same facts as :func:`redfish_tools.discover.discover`)."""
    start = conn.requests_sent
    facts = facts_from(await fetch_async(AsyncService(conn)), conn.target.name)
    facts.requests = conn.requests_sent - start
    return facts


def run_fleet_async(
    targets: Sequence[BmcTarget],
    operation: Callable[[AsyncBmcConnection], Awaitable[T]],
    *,
    policy: ConnectionPolicy | None = None,
    max_bmcs: int = DEFAULT_MAX_BMCS,
    progress: Progress | None = None,
) -> list[NodeResult[T]]:
    """Run ``operation`` on every BMC in one event loop; results in the order of ``targets``; never raises
    for a node's failure."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError("BMC target names must be unique")

    async def one(target: BmcTarget, gate: asyncio.Semaphore) -> NodeResult[T]:
        async with gate:
            start = time.monotonic()
            conn = AsyncBmcConnection(target, policy)
            try:
                async with conn:
                    value = await operation(conn)
                result = NodeResult(target.name, True, value, None, time.monotonic() - start, conn.requests_sent)
            except E.RedfishError as exc:
                result = NodeResult(target.name, False, None, exc.as_dict(), time.monotonic() - start,
                                    conn.requests_sent)  # fmt: skip
            except Exception as exc:  # never let one node stop the others
                error = {
                    "kind": "internal",
                    "message": redact(f"{type(exc).__name__}: {exc}"),
                    "bmc": target.name,
                }
                result = NodeResult(target.name, False, None, error, time.monotonic() - start, conn.requests_sent)
        if progress:
            progress(result)
        return result

    async def main() -> list[NodeResult[T]]:
        gate = asyncio.Semaphore(max(1, max_bmcs))
        return list(await asyncio.gather(*(one(t, gate) for t in targets)))

    return asyncio.run(main()) if targets else []
