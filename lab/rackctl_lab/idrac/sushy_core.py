"""sushy-tools in-process: the Redfish core of every emulated iDRAC in one worker process.

sushy-tools' emulator is a module-level Flask app; a worker configures it once with its fake driver and
one fake system per BMC (its NICs' MACs, its power state) and a fresh ``SUSHY_EMULATOR_STATE_DIR``. The
iDRAC layer calls it as a WSGI app (no socket) for systems, power, boot override, NICs and managers.

Two changes to sushy's fake driver, through a subclass: a power transition takes the BMC's configured
delay instead of a random 1-11 s, and a callback fires when a host boots (power goes to On), which the
iDRAC layer needs for "apply pending BIOS at reset" and "boot override Once"; and the driver's records
live in process memory instead of sushy's sqlite file (one owner per worker; see ``__init__``).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from sushy_tools.emulator import main as sushy_main
from sushy_tools.emulator.resources.systems import fakedriver

BootHook = Callable[[str], None]


class LabFakeDriver(fakedriver.FakeDriver):
    """sushy's fake driver with a fixed per-system power delay and a boot callback."""

    boot_hooks: dict[str, BootHook] = {}
    change_hooks: dict[str, BootHook] = {}
    power_delays: dict[str, float] = {}

    def __init__(self) -> None:
        super().__init__()
        # sushy keeps fake systems in a sqlite-backed dict so that several emulator processes can share
        # them; each lab worker owns its systems alone, and a sqlite round trip per access cost ~5 ms a
        # request. Keep the same records in process memory (same driver logic, no shared file).
        self._systems = {uuid: dict(system) for uuid, system in self._systems.items()}

    def set_power_state(self, identity: str, state: str) -> None:
        system = self._get(identity)
        super().set_power_state(identity, state)
        fresh = self._get(system["uuid"])
        pending = fresh.get("pending_power")
        if pending:
            # sushy draws 1-11 s; the lab wants a known, short delay.
            pending["apply_time"] = time.time() + self.power_delays.get(system["uuid"], 0.5)
            self._update(fresh, pending_power=pending)

    def _update(self, system: Any, **changes: Any) -> None:
        if isinstance(system, str):
            system = self._get(system)
        booting = changes.get("power_state") == "On" and system.get("power_state") != "On"
        super()._update(system, **changes)
        if "power_state" in changes:
            changed = self.change_hooks.get(system["uuid"])
            if changed:
                changed(system["uuid"])
        if booting:
            hook = self.boot_hooks.get(system["uuid"])
            if hook:
                hook(system["uuid"])


class SushyCore:
    """One configured sushy-tools app and direct calls into it."""

    def __init__(self, systems: list[dict[str, Any]], state_dir: str) -> None:
        app = sushy_main.app
        app.configure(
            extra_config={
                "SUSHY_EMULATOR_FAKE_DRIVER": True,
                "SUSHY_EMULATOR_FAKE_SYSTEMS": systems,
                "SUSHY_EMULATOR_STATE_DIR": state_dir,
                "SUSHY_EMULATOR_FEATURE_SET": "full",
            }
        )
        app.logger.setLevel(logging.WARNING)
        # Pre-seed sushy's memoized ``systems`` property with the lab driver (sushy offers no hook).
        systems_fn = type(app).systems.fget.__wrapped__  # type: ignore[attr-defined]
        cache = app.__dict__.setdefault("_cache", {})
        self.driver = LabFakeDriver.initialize(app.config, app.logger)()
        cache.setdefault(systems_fn, {})[(frozenset(), frozenset())] = self.driver
        # Same reason as LabFakeDriver.__init__: the indicator LEDs' records in memory, not sqlite.
        app.indicators._indicators = dict(app.indicators._indicators)
        self.app = app

    def register(self, uuid: str, power_delay_s: float, on_boot: BootHook, on_change: BootHook) -> None:
        """Attach a BMC's power delay, boot callback and power-change callback to its sushy system."""
        LabFakeDriver.power_delays[uuid] = power_delay_s
        LabFakeDriver.boot_hooks[uuid] = on_boot
        LabFakeDriver.change_hooks[uuid] = on_change

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        """Run one request through sushy's WSGI app: (status, decoded JSON or None, headers)."""
        data = json.dumps(body).encode() if body is not None else b""
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "443",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "https",
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": io.StringIO(),
            "CONTENT_LENGTH": str(len(data)),
            "CONTENT_TYPE": "application/json",
        }
        result: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            result["status"] = int(status.split(maxsplit=1)[0])
            result["headers"] = dict(headers)

        raw = b"".join(self.app(environ, start_response))
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            doc = {"error": {"message": raw.decode(errors="replace")}}
        return result["status"], doc, result["headers"]

    def power_state(self, uuid: str) -> str:
        """Current power state (reading it applies a due transition, as sushy does)."""
        return str(self.driver.get_power_state(uuid))

    def power_pending(self, uuid: str) -> bool:
        """Whether a power transition of that system is still to be applied."""
        return bool(self.driver._systems[uuid].get("pending_power"))

    def set_boot_device(self, uuid: str, device: str) -> None:
        self.driver.set_boot_device(uuid, device)
