"""Session-wide test setup, and the real kube-apiserver that tests of every directory share."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import timing
from tests.cluster import apiserver
from tests.cluster.apiserver import ApiServer
from tests.kube_objects import KubeObjects

#: the per-area time budget printed at the end (tests/budget.py); the session's installed lab, shared by
#: every VM test that does not test installing itself, its modules run last (tests/installed_lab.py)
pytest_plugins = ["tests.budget", "tests.installed_lab"]


def pytest_configure(config: pytest.Config) -> None:
    """Deliver Ctrl-C as Python does by default, however the test run was started; in a pytest-xdist worker,
    the terminal's size left to the tests, as in a plain run.

    A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored in every child
    process: the tests that send a real SIGINT (to this process or to a ``rackctl`` subprocess) would then
    see nothing. Python installs its own handler only when SIGINT was not ignored at start.

    An xdist worker starts with ``COLUMNS=80`` in its environment where the run that started it had none,
    and Rich fixes a console's width from ``COLUMNS`` when the console is made: the CLI's module-level
    consoles would be 80 columns wide for every test of that worker, whatever ``COLUMNS`` a test hands
    CliRunner (``tests/day2/test_apply_on_rack.py``'s ``--wide`` table failed so under xdist only).
    """
    if hasattr(config, "workerinput"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timing.factor()  # a bad RACKCTL_TEST_TIME_FACTOR stops the run before any test, naming the fix
    except timing.TimeFactorError as error:
        raise pytest.UsageError(str(error)) from None


# -- the lab's Kubernetes components, built once per machine (rackctl lab components) ------------------
#: What the tests run for real: the API server and etcd, kubectl, kubeadm (its pins and image list).
TEST_COMPONENTS = ("kube-apiserver", "etcd", "kubectl", "kubeadm")


def built_components(names: tuple[str, ...]) -> dict[str, Path]:
    """The newest pinned release's programs ``names``, built from their Go modules (cached after the first).

    Skips without a Go toolchain; with RACKCTL_REQUIRE_COMPONENTS=1 (scripts/test.sh, CI) that is a failure.
    """
    from bootstrap.errors import EnvironmentMissing
    from rackctl_lab.components import build
    from rackctl_lab.components.pins import RELEASES

    release = RELEASES[next(iter(RELEASES))]
    try:
        built = build.build(build.select(release, names))
    except EnvironmentMissing as exc:
        if os.environ.get("RACKCTL_REQUIRE_COMPONENTS") == "1":
            pytest.fail(f"the lab's Kubernetes components cannot be built: {exc.message}")
        pytest.skip(f"the lab's Kubernetes components cannot be built: {exc.message}")
    return {b.name: Path(b.path) for b in built}


@pytest.fixture(scope="session")
def kube_components() -> dict[str, Path]:
    """:data:`TEST_COMPONENTS` of the newest pinned release (see :func:`built_components`)."""
    return built_components(TEST_COMPONENTS)


# -- the real kube-apiserver, one per session for every test directory ---------------------------------
@pytest.fixture(scope="session")
def kube_apiserver(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kube_components: dict[str, Path],
) -> Iterator[ApiServer]:
    """The pinned release's kube-apiserver + etcd on loopback for the whole session (tests/cluster/apiserver.py).

    Its kubectl leads PATH for the session (the tests' and rackctl subprocesses' ``kubectl``). Skips or fails
    as ``kube_components`` does. Logs go to stderr when a test of the session failed.
    """
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{kube_components['kubectl'].parent}{os.pathsep}{path}"
    server = apiserver.start(
        kube_components["kube-apiserver"], kube_components["etcd"], tmp_path_factory.mktemp("kube-apiserver")
    )
    try:
        yield server
    finally:
        server.stop()
        os.environ["PATH"] = path
        if request.session.testsfailed:
            sys.stderr.write(f"\n--- kube-apiserver/etcd logs ({server.workdir})\n{server.logs()[-8000:]}\n")


@pytest.fixture
def kube(kube_apiserver: ApiServer) -> Iterator[KubeObjects]:
    """Objects the test makes on the real API server (nodes, pods, budgets); removed after the test."""
    objects = KubeObjects(kube_apiserver)
    try:
        yield objects
    finally:
        objects.cleanup()


@pytest.fixture
def kubeconfig(kube_apiserver: ApiServer, tmp_path: Path) -> Path:
    """An admin kubeconfig for the real API server (client cert, CA pinned)."""
    return kube_apiserver.write_kubeconfig(tmp_path / "kube" / "kubeconfig")
