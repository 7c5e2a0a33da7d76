"""One emulated iDRAC 9: state, authentication, faults, and the request dispatcher.

sushy-tools answers what it models (systems, power, boot override, NICs, manager, service root): the
iDRAC layer rewrites its ids and links to Dell's and overlays Dell fields. Everything sushy-tools has no
model for is done here (each handler module says which): sessions, Dell hardware inventory, BIOS with
pending settings and jobs, LC status, SCP, firmware, virtual media, faults and latency.
"""

from __future__ import annotations

import base64
import hmac
import json
import random
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs

from rackctl_lab.idrac import bios, hardware
from rackctl_lab.idrac.jobs import JobQueue
from rackctl_lab.idrac.machine import LibvirtMachine
from rackctl_lab.idrac.replies import SESSIONS, Reply, redfish_error
from rackctl_lab.idrac.routes import build_routes
from rackctl_lab.idrac.spec import EmulatedBmcSpec, FaultSpec
from rackctl_lab.idrac.sushy_core import SushyCore

SESSION_TIMEOUT_S = 1800
SECRET_HEADERS = frozenset({"authorization", "x-auth-token", "cookie", "set-cookie"})
NO_AUTH_PATHS = frozenset({"/redfish", "/redfish/v1", "/redfish/v1/odata", "/redfish/v1/$metadata"})
#: Methods whose answer a ``lose_answer_*`` fault can lose (they change something on the BMC).
CHANGING_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})


@dataclass
class Session:
    id: str
    user: str
    last_used: float


Handler = Callable[..., Reply]


class EmulatedIdrac:
    """State and behaviour of one iDRAC. Not thread-safe: one worker event loop drives it."""

    def __init__(self, spec: EmulatedBmcSpec, core: SushyCore, uuid: str) -> None:
        self.spec = spec
        self.core = core
        self.uuid = uuid
        self.faults: FaultSpec = spec.faults
        self.latency_ms = spec.latency_ms
        self.rng = random.Random(f"{spec.name}/{spec.service_tag}")  # noqa: S311 - fault draws, not crypto
        self.sessions: dict[str, Session] = {}  # token -> session
        self._session_ids = 0
        self.requests: deque[dict[str, Any]] = deque(maxlen=20000)
        self._sushy_cache: dict[str, tuple[int, str]] = {}
        self.reset_until = 0.0
        self._answers_lost = 0
        self._answers_lost_for: FaultSpec | None = None
        self.jobs = JobQueue()
        first_nic = next(iter(spec.nics), None)
        self.bios_current = bios.defaults(spec.service_tag, spec.model, spec.bios_version, first_nic)
        self.bios_pending: dict[str, Any] = {}
        self.firmware = hardware.initial_firmware(spec)
        self.previous_firmware: dict[str, dict] = {}
        #: every SimpleUpdate accepted: time, image, component, version, apply time, job (for tests)
        self.firmware_updates: list[dict[str, Any]] = []
        self.update_failures = 0
        self.update_failures_for: FaultSpec | None = None
        self.boot_enabled = "Disabled"
        self.boot_target = "None"
        self.boot_mode = "UEFI"
        self.last_boot_source: str | None = None
        self.boot_count = 0
        self.virtual_media: dict[str, dict[str, Any]] = {
            "1": {
                "Name": "Virtual CD",
                "MediaTypes": ["CD", "DVD"],
                "Image": None,
                "Inserted": False,
                "WriteProtected": True,
            },
            "2": {
                "Name": "Virtual Removable Disk",
                "MediaTypes": ["USBStick"],
                "Image": None,
                "Inserted": False,
                "WriteProtected": True,
            },
        }
        self.mac_by_fqdd = dict(spec.nics)
        self.fqdd_by_mac = {mac.lower(): fqdd for fqdd, mac in spec.nics.items()}
        self.processors = hardware.processors(spec)
        self.memory = hardware.memory(spec)
        self.storage_controller, self.drives = hardware.storage(spec)
        self.pcie = hardware.pcie_devices(spec)
        self.machine = LibvirtMachine(spec.vm_domain) if spec.vm_domain else None
        core.register(uuid, spec.power_delay_s, self.on_boot, self.on_power_change)
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = build_routes(self)
        # Path segments never contain "/", so a route can only match paths of its own depth.
        self._routes_by_depth: dict[int, list[tuple[str, re.Pattern[str], Handler]]] = {}
        for route in self.routes:
            depth = route[1].pattern.replace("[^/]", "").count("/")
            self._routes_by_depth.setdefault(depth, []).append(route)

    # ----- lifecycle hooks --------------------------------------------------------------------------

    def on_boot(self, _uuid: str) -> None:
        """The host just powered on: honour a ``Once`` override, start scheduled BIOS jobs."""
        self.boot_count += 1
        self._sushy_cache.clear()
        self.last_boot_source = self.boot_target if self.boot_enabled != "Disabled" else "Hdd"
        if self.machine is not None:
            self.machine.start(self.last_boot_source)
        if self.boot_enabled == "Once":
            self.boot_enabled, self.boot_target = "Disabled", "None"
            self.core.set_boot_device(self.uuid, "None")
        now = time.time()
        for job in self.jobs.scheduled_at_boot():
            job.start_now(now)

    def on_power_change(self, _uuid: str) -> None:
        """Power state changed: drop cached answers; pull the VM's plug when it went off."""
        self._sushy_cache.clear()
        if self.machine is not None and self.core.driver._systems[self.uuid].get("power_state") == "Off":
            self.machine.stop()

    def sync_machine(self) -> None:
        """A VM that powered itself off (shutdown, deploy ramdisk done) reads Off, as a real host would."""
        if self.machine is None or self.core.power_pending(self.uuid):
            return
        if self.core.driver._systems[self.uuid].get("power_state") == "On" and self.machine.running() is False:
            self.core.driver._update(self.uuid, power_state="Off")

    def reset_idrac(self, seconds: float | None = None) -> None:
        """Emulate an iDRAC reset: connections dropped for a while and every session lost."""
        self.reset_until = time.time() + (self.faults.reset_s if seconds is None else seconds)
        self.sessions.clear()

    def tick(self) -> None:
        """Advance time-driven state: due power transitions (and boots), jobs, idle sessions."""
        now = time.time()
        self.core.power_state(self.uuid)
        self.sync_machine()
        self.jobs.refresh(now)
        for token, sess in list(self.sessions.items()):
            if now - sess.last_used > SESSION_TIMEOUT_S:
                del self.sessions[token]

    # ----- request handling -------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        """Answer one HTTP request (latency is applied by the server before this is called)."""
        entry: dict[str, Any] = {
            "time": time.time(),
            "method": method,
            "path": path,
            "query": query,
            "headers": {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS},
            "auth": "none",
            "fault": None,
        }
        reply = self._handle(method, path, query, headers, body, entry=entry)
        entry["status"] = 0 if reply.drop else reply.status
        self.requests.append(entry)
        return reply

    def _handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytes,
        *,
        entry: dict[str, Any],
    ) -> Reply:
        path = "/" + path.strip("/") if path.strip("/") else "/"
        faults = self.faults
        if faults.always_fail:
            entry["fault"] = "always_fail"
            return redfish_error(500, "Base.1.12.InternalError", "The request failed due to an internal error.")
        self.tick()
        if time.time() < self.reset_until:
            entry["fault"] = "reset"
            return Reply(0, drop=True)
        if not any(path.startswith(p) for p in faults.fault_exempt_paths):
            draw = self.rng.random()
            if draw < faults.timeout_rate:
                entry["fault"] = "timeout"
                return Reply(0, drop=True, hang_s=faults.hang_s)
            draw -= faults.timeout_rate
            if draw < faults.status_503_rate:
                entry["fault"] = "503"
                return Reply(
                    503,
                    {
                        "error": {
                            "code": "Base.1.12.ServiceTemporarilyUnavailable",
                            "message": "Service temporarily unavailable.",
                        }
                    },
                    {"Retry-After": "1"},
                )
            draw -= faults.status_503_rate
            if draw < faults.swc0700_rate:
                entry["fault"] = "SWC0700"
                return redfish_error(
                    503,
                    "IDRAC.2.8.SWC0700",
                    "iDRAC is not ready. The configuration "
                    "values cannot be accessed. Please retry after a few minutes.",
                    "Retry the operation.",
                )
        if not (path in NO_AUTH_PATHS or (method == "POST" and path == SESSIONS)):
            kind = self._authenticate(headers)
            entry["auth"] = kind or "rejected"
            if kind is None:
                reply = redfish_error(
                    401,
                    "Base.1.12.InsufficientPrivilege",
                    "There are insufficient privileges for the "
                    "account or credentials associated with the current session to perform the requested "
                    "operation.",
                    "Log in with valid credentials.",
                )
                reply.headers["WWW-Authenticate"] = 'Basic realm="RedfishService"'
                return reply
        data: Any = None
        if body:
            try:
                data = json.loads(body)
            except ValueError:
                return redfish_error(
                    400,
                    "Base.1.12.MalformedJSON",
                    "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
                )
        reply = self.dispatch(method, path, data, headers)
        if method == "GET" and reply.status == 200 and "$expand" in query:
            self._expand(reply, query)
        if self._lose_answer(method, path):
            entry["fault"] = "lost_answer"
            entry["acted_status"] = reply.status  # what the handler did; the client gets no answer
            return Reply(0, drop=True)
        return reply

    def _lose_answer(self, method: str, path: str) -> bool:
        """Whether this request, already carried out, loses its answer (``lose_answer_*`` faults)."""
        faults = self.faults
        if method not in CHANGING_METHODS:
            return False
        if self._answers_lost_for is not faults:  # new faults set: count afresh
            self._answers_lost_for, self._answers_lost = faults, 0
        if any(path.startswith(p) for p in faults.lose_answer_paths):
            if faults.lose_answer_count == 0 or self._answers_lost < faults.lose_answer_count:
                self._answers_lost += 1
                return True
            return False
        if faults.lose_answer_rate and not any(path.startswith(p) for p in faults.fault_exempt_paths):
            return self.rng.random() < faults.lose_answer_rate
        return False

    def dispatch(self, method: str, path: str, data: Any = None, headers: dict[str, str] | None = None) -> Reply:
        """Route an authenticated request to its handler."""
        known_path = False
        for route_method, pattern, handler in self._routes_by_depth.get(path.count("/"), ()):
            match = pattern.fullmatch(path)
            if match is None:
                continue
            known_path = True
            if route_method == method:
                return handler(data=data, headers=headers or {}, **match.groupdict())
        if known_path:
            return redfish_error(405, "Base.1.12.OperationNotAllowed", f"{method} is not allowed on {path}.")
        return redfish_error(
            404,
            "Base.1.12.ResourceMissingAtURI",
            f"The resource at the URI {path} was not found.",
            "Follow links from /redfish/v1.",
        )

    def _expand(self, reply: Reply, query: str) -> None:
        """``$expand=*|.|~($levels=1)``: inline the members of a collection."""
        value = (parse_qs(query).get("$expand") or [""])[0]
        if not value or value[0] not in "*.~" or not isinstance(reply.body, dict):
            return
        members = reply.body.get("Members")
        if not isinstance(members, list):
            return
        expanded = []
        for member in members:
            ref = member.get("@odata.id") if isinstance(member, dict) else None
            sub = self.dispatch("GET", ref) if ref else None
            expanded.append(sub.body if sub is not None and sub.status == 200 else member)
        reply.body["Members"] = expanded

    def _authenticate(self, headers: dict[str, str]) -> str | None:
        lower = {k.lower(): v for k, v in headers.items()}
        token = lower.get("x-auth-token")
        if token:
            sess = self.sessions.get(token)
            if sess is None:
                return None
            sess.last_used = time.time()
            return "session"
        auth = lower.get("authorization", "")
        if auth[:6].lower() == "basic ":
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return None
            return "basic" if self.check_credentials(user, password) else None
        return None

    def check_credentials(self, user: str, password: str) -> bool:
        """Constant-time comparison of both user name and password."""
        ok_user = hmac.compare_digest(user.encode(), self.spec.username.encode())
        ok_pass = hmac.compare_digest(password.encode(), self.spec.password.encode())
        return ok_user and ok_pass

    def new_session(self, user: str) -> tuple[str, Session]:
        self._session_ids += 1
        token = secrets.token_hex(16)
        sess = Session(id=str(self._session_ids), user=user, last_used=time.time())
        self.sessions[token] = sess
        return token, sess

    # ----- sushy helpers -----------------------------------------------------------------------------

    def sushy(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Call sushy-tools with this BMC's system/manager id substituted for the Dell ids.

        GET answers are cached per path until anything could change them: any other method sent to
        sushy, a boot, or a power transition still pending (sushy applies it when it is next read).
        """
        if method == "GET" and not self.core.power_pending(self.uuid):
            cached = self._sushy_cache.get(path)
            if cached is not None:
                return cached[0], json.loads(cached[1])
        else:
            self._sushy_cache.clear()
        real = path.replace("System.Embedded.1", self.uuid).replace("iDRAC.Embedded.1", self.uuid)
        status, doc, _ = self.core.call(method, real, body)
        doc = self.dellify(doc)
        if method == "GET" and not self.core.power_pending(self.uuid):
            self._sushy_cache[path] = (status, json.dumps(doc))
        else:
            self._sushy_cache.clear()
        return status, doc

    def dellify(self, doc: Any) -> Any:
        """Rewrite sushy's ids and links (system and manager UUIDs, MAC-named NICs) to Dell's."""
        if doc is None:
            return None
        text = json.dumps(doc)
        text = text.replace(f"/Systems/{self.uuid}", "/Systems/System.Embedded.1")
        text = text.replace(f"/Managers/{self.uuid}", "/Managers/iDRAC.Embedded.1")
        for fqdd, mac in self.mac_by_fqdd.items():
            text = text.replace(f"/EthernetInterfaces/{mac}", f"/EthernetInterfaces/{fqdd}")
        return json.loads(text)

    def power_state(self) -> str:
        return self.core.power_state(self.uuid)

    # ----- views for the control API ----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Emulator-side truth for tests (no secrets)."""
        self.tick()
        return {
            "name": self.spec.name,
            "power_state": self.power_state(),
            "bios": dict(self.bios_current),
            "bios_pending": dict(self.bios_pending),
            "jobs": [job.dell_job() for job in self.jobs.jobs.values()],
            "firmware": {k: v["Version"] for k, v in self.firmware.items()},
            "firmware_updates": [dict(u) for u in self.firmware_updates],
            "boot": {
                "enabled": self.boot_enabled,
                "target": self.boot_target,
                "last_boot_source": self.last_boot_source,
                "boot_count": self.boot_count,
            },
            "virtual_media": {
                k: {"Image": v["Image"], "Inserted": v["Inserted"]} for k, v in self.virtual_media.items()
            },
            "open_sessions": len(self.sessions),
            "faults": asdict(self.faults),
            "latency_ms": self.latency_ms,
        }
