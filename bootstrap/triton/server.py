"""Locate and run the real ``tritonserver`` bundled in the ``nvidia-pytriton`` wheel, on CPU (on loopback unless
told another address of this host)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import tritonclient.http as httpclient

from bootstrap.errors import EnvironmentMissing, Problem

STUB_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class TritonInstall:
    """Paths of the tritonserver pieces inside the pytriton wheel."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path


def find_tritonserver() -> TritonInstall:
    """Find tritonserver in the installed ``nvidia-pytriton`` wheel, or say how to get it."""
    spec = importlib.util.find_spec("pytriton")
    fix = "pip install 'rackctl[load-check]' (brings nvidia-pytriton)"
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentMissing(
            "tritonserver not found: the nvidia-pytriton wheel is not installed",
            problems=[Problem("nvidia-pytriton", "not installed", fix)],
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    install = TritonInstall(
        binary=root / "bin" / "tritonserver",
        python_backend=root / "backends" / "python",
        stub=root / "python_backend_stubs" / STUB_PYTHON / "triton_python_backend_stub",
        libs=root.parent.parent / "nvidia_pytriton.libs",
    )
    for path in (install.binary, install.python_backend, install.stub, install.libs):
        if not path.exists():
            raise EnvironmentMissing(
                f"incomplete nvidia-pytriton wheel: {path} is missing",
                problems=[Problem(str(path), "missing", fix)],
            )
    return install


def free_port(address: str = "127.0.0.1") -> int:
    """An ephemeral port of ``address`` nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _backend_dir(install: TritonInstall, where: Path) -> Path:
    """A backend directory whose python backend has the stub of this interpreter's version."""
    python_dir = where / "backends" / "python"
    python_dir.mkdir(parents=True)
    for item in install.python_backend.iterdir():
        if item.is_file():
            (python_dir / item.name).symlink_to(item)
    (python_dir / "triton_python_backend_stub").symlink_to(install.stub)
    return where / "backends"


class TritonFailed(RuntimeError):
    """tritonserver exited or never became ready; ``log`` holds its own words."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


class TritonServer:
    """A running tritonserver (context manager; stops what it started). Its HTTP, gRPC and metrics ports
    listen on ``address``: 127.0.0.1 unless another address of this host is given (a Kubernetes Endpoints
    object may not point at loopback)."""

    def __init__(self, repository: Path, *, startup_timeout: float = 180.0, address: str = "127.0.0.1") -> None:
        self.repository = repository
        self.startup_timeout = startup_timeout
        self.address = address
        self.http_port = free_port(address)
        self.grpc_port = free_port(address)
        self.metrics_port = free_port(address)
        self._tmp = tempfile.TemporaryDirectory(prefix="rackctl-triton-")
        self._log_path = Path(self._tmp.name) / "tritonserver.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.load_seconds = 0.0

    @property
    def url(self) -> str:
        return f"{self.address}:{self.http_port}"

    def log(self) -> str:
        """Everything tritonserver printed so far."""
        return self._log_path.read_text(errors="replace") if self._log_path.exists() else ""

    def start(self) -> TritonServer:
        install = find_tritonserver()
        backends = _backend_dir(install, Path(self._tmp.name))
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(install.libs), env.get("LD_LIBRARY_PATH")]))
        # The stub's embedded Python takes model code's packages from the first python on PATH: ours.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        args = [
            str(install.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.address}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.address}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.address}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            "--allow-gpu-metrics=false",
            "--strict-readiness=true",
            "--exit-on-error=true",
        ]
        started = time.monotonic()
        with self._log_path.open("wb") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready(started)
        self.load_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        client = httpclient.InferenceServerClient(self.url, connection_timeout=2.0, network_timeout=5.0)
        try:
            while time.monotonic() - started < self.startup_timeout:
                if self._proc is not None and self._proc.poll() is not None:
                    raise TritonFailed(f"tritonserver exited with code {self._proc.returncode}", self.log())
                try:
                    if client.is_server_ready() and self._listening(self.metrics_port):
                        return
                except Exception:  # noqa: S110 - not listening yet
                    pass
                time.sleep(0.25)
        finally:
            client.close()
        self.stop()
        raise TritonFailed(f"tritonserver not ready after {self.startup_timeout:.0f} s", self.log())

    def _listening(self, port: int) -> bool:
        """Whether ``port`` accepts connections (the metrics service starts after HTTP reports ready)."""
        try:
            with socket.create_connection((self.address, port), timeout=2.0):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop tritonserver (SIGTERM, then SIGKILL) and remove its temporary files."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> TritonServer:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
