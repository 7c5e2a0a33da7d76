"""A worker process serving a shard of emulated iDRACs: one asyncio loop, one HTTPS port per BMC.

Run as ``python -m rackctl_lab.idrac.worker CONFIG.json`` (written by :mod:`rack`, mode 0600). When every
port is bound it writes its ready file (PID, control port, BMC ports). A plain-HTTP control port on
127.0.0.1, guarded by a random token, serves the lab's own questions (sessions, request log, state) and
fault changes; it is not part of any BMC. SIGTERM stops it. No access log: nothing secret is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bootstrap.fsutil import atomic_write_text
from rackctl_lab.idrac.bmc import EmulatedIdrac
from rackctl_lab.idrac.replies import Reply
from rackctl_lab.idrac.spec import EmulatedBmcSpec, FaultSpec
from rackctl_lab.idrac.sushy_core import SushyCore

BASE_HEADERS = {"OData-Version": "4.0", "Server": "Appweb/4.5.4", "Cache-Control": "no-cache"}


def _response(reply: Reply) -> web.StreamResponse:
    headers = {**BASE_HEADERS, **reply.headers}
    if reply.body is None or reply.status == 204:
        return web.Response(status=reply.status, headers=headers)
    if isinstance(reply.body, str):
        return web.Response(status=reply.status, text=reply.body, content_type=reply.content_type, headers=headers)
    return web.Response(
        status=reply.status, text=json.dumps(reply.body), content_type="application/json", headers=headers
    )


def make_handler(bmc: EmulatedIdrac) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """The aiohttp low-level handler of one BMC: latency, then the iDRAC layer; drops when faulted."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        if bmc.latency_ms:
            await asyncio.sleep(bmc.latency_ms / 1000)
        reply = bmc.handle(request.method, request.path, request.query_string, dict(request.headers), body)
        if reply.drop:
            if reply.hang_s:
                await asyncio.sleep(reply.hang_s)
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing is sent: the connection is gone
        return _response(reply)

    return handle


def _ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


def control_app(bmcs: dict[str, EmulatedIdrac], token: str) -> web.Application:
    """The lab's control API for this worker's BMCs."""

    def bmc_of(request: web.Request) -> EmulatedIdrac:
        if not hmac.compare_digest(request.headers.get("X-Lab-Token", ""), token):
            raise web.HTTPForbidden(text="bad lab token")
        name = request.match_info["name"]
        if name not in bmcs:
            raise web.HTTPNotFound(text=f"no BMC named {name}")
        return bmcs[name]

    async def sessions(request: web.Request) -> web.Response:
        bmc = bmc_of(request)
        bmc.tick()
        return web.json_response({"open_sessions": len(bmc.sessions)})

    async def requests(request: web.Request) -> web.Response:
        return web.json_response({"requests": list(bmc_of(request).requests)})

    async def state(request: web.Request) -> web.Response:
        return web.json_response(bmc_of(request).state())

    async def faults(request: web.Request) -> web.Response:
        bmc = bmc_of(request)
        data = await request.json()
        data["fault_exempt_paths"] = tuple(data.get("fault_exempt_paths", ()))
        bmc.faults = FaultSpec(**data)
        return web.json_response({"ok": True})

    async def latency(request: web.Request) -> web.Response:
        bmc = bmc_of(request)
        bmc.latency_ms = int((await request.json())["latency_ms"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/bmc/{name}/sessions", sessions)
    app.router.add_get("/bmc/{name}/requests", requests)
    app.router.add_get("/bmc/{name}/state", state)
    app.router.add_put("/bmc/{name}/faults", faults)
    app.router.add_put("/bmc/{name}/latency", latency)
    return app


async def serve(config: dict[str, Any]) -> None:
    """Start every BMC of the shard and the control API; run until SIGTERM (or the parent dies)."""
    entries = config["bmcs"]
    specs = [EmulatedBmcSpec.from_json(e["spec"]) for e in entries]
    systems = [
        {
            "uuid": e["uuid"],
            "name": s.name,
            "power_state": s.power_state,
            "external_notifier": False,
            "nics": [{"mac": mac} for mac in s.nics.values()],
        }
        for e, s in zip(entries, specs, strict=True)
    ]
    core = SushyCore(systems, config["state_dir"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    runners: list[web.BaseRunner] = []
    bmcs: dict[str, EmulatedIdrac] = {}
    ports: dict[str, dict[str, Any]] = {}
    for entry, spec in zip(entries, specs, strict=True):
        bmc = EmulatedIdrac(spec, core, entry["uuid"])
        bmcs[spec.name] = bmc
        runner = web.ServerRunner(web.Server(make_handler(bmc)), handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(
            runner, spec.address, spec.port, ssl_context=_ssl_context(entry["cert_file"], entry["key_file"])
        )
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        ports[spec.name] = {"address": spec.address, "port": port}

    ctl_runner = web.AppRunner(control_app(bmcs, config["token"]), handle_signals=False, access_log=None)
    await ctl_runner.setup()
    ctl_site = web.TCPSite(ctl_runner, "127.0.0.1", 0)
    await ctl_site.start()
    runners.append(ctl_runner)
    ready = {"pid": os.getpid(), "control_port": ctl_runner.addresses[0][1], "bmcs": ports}
    atomic_write_text(config["ready_file"], json.dumps(ready))

    parent = config.get("parent_pid")
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        if parent and os.getppid() != parent:
            break  # the rack that started us is gone: do not outlive it
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True), timeout=3)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rackctl_lab.idrac.worker CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
