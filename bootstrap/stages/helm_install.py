"""Install or upgrade the pinned charts on a live cluster with Helm itself (helm-python-sdk's ``Config``).

For each release, in install order (:func:`install_releases`):

- the chart must be at hand (``--charts DIR``: :func:`bootstrap.cluster.helm_render.chart_source`); otherwise
  the release stays "rendered + validated, not installed: chart X VERSION not in --charts DIR";
- Helm's record of the release decides (:func:`ensure_release`): none yet → ``install`` (the namespace created
  when missing); ``deployed`` with the same chart version and the same user values (``get_values``) →
  "unchanged", no new revision; ``deployed`` otherwise → ``upgrade``; any other state (``failed``,
  ``pending-*``, ``uninstalling``, ``uninstalled``) → "refused", with Helm's status and what to do;
- then the release's workloads (the Deployments, DaemonSets and StatefulSets of the manifest Helm stored, and
  the Prometheus and Alertmanager resources the Prometheus operator runs pods for) are watched to ready
  (:func:`bootstrap.kube.apply.watch_workloads`) up to the timeout;
- an install or upgrade that fails (Helm's error, or its workloads not ready in time) is undone as Helm's
  ``--atomic`` does (:func:`undo`): the upgrade rolled back to the revision before it ("rolled back", history
  kept), the install uninstalled ("uninstalled"); either way the outcome fails.

The first release that fails (Helm's error, a refused state, a workload not ready in time) stops the ones
after it: they depend on it (CNI first, monitoring's CRDs before the GPU operator). Helm's messages pass
through :func:`redfish_tools.secrets.redact`; rackctl hands Helm the kubeconfig's path, never its content.

A release marked ``install="server-side"`` (Calico's CRD chart from v3.32) keeps no Helm record: it is rendered
with Helm and applied server-side as rackctl, its CRDs waited for until established (:func:`apply_rendered`).

Helm 4 applies server-side (the release's ``applyMethod: ssa``); a 1.20 API server accepts that (beta). The
field manager is Helm's default, the process's name (``python`` under rackctl): helm-python-sdk 0.2.2 has no
option to set it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.cluster.charts import Release
from bootstrap.cluster.helm_render import chart_source, helm_sdk, render_release
from bootstrap.errors import RackctlError
from bootstrap.kube.api import LiveApi
from bootstrap.kube.apply import OPERATED_KINDS, WORKLOAD_KINDS, WorkloadRollout, apply_objects, watch_workloads
from redfish_tools.secrets import redact

#: Helm's status of a release it can upgrade.
DEPLOYED = "deployed"
#: Outcomes of one release.
INSTALLED, UPGRADED, UNCHANGED = "installed", "upgraded", "unchanged"
NOT_INSTALLED, FAILED, REFUSED, NOT_ATTEMPTED = "not installed", "failed", "refused", "not attempted"
#: A failed upgrade rolled back to the revision before it, a failed install uninstalled (Helm's ``--atomic``).
ROLLED_BACK, UNINSTALLED = "rolled back", "uninstalled"
#: A ``server-side`` release's templates applied by rackctl (no Helm release kept).
APPLIED = "applied server-side"
#: How often a CRD just applied is read again until the API server serves it.
ESTABLISHED_POLL_S = 0.5


def values_digest(values: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the values as canonical JSON (keys sorted): what the journal records."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _plain(values: dict[str, Any]) -> Any:
    """The values as Helm stores them (a JSON round trip)."""
    return json.loads(json.dumps(values))


@dataclass
class ReleaseOutcome:
    """What happened to one release: ``status`` is one of the outcomes above; ``ok`` false fails the stage."""

    release: Release
    status: str
    revision: int | None = None
    message: str = ""
    workloads: dict[str, str] = field(default_factory=dict)
    ok: bool = True
    #: what rackctl asked of Helm (``install``, ``upgrade``; empty: nothing), and the revision before an upgrade
    action: str = ""
    prior: int | None = None

    @property
    def applied(self) -> bool:
        """Helm holds the release at ``revision`` as rackctl wants it (whether or not it changed now); for a
        ``server-side`` release, its objects are applied and its CRDs established."""
        return self.status in (INSTALLED, UPGRADED, UNCHANGED, APPLIED) and self.ok

    @property
    def label(self) -> str:
        """``RELEASE (CHART VERSION into NS)``."""
        r = self.release
        return f"{r.name} ({r.chart} {r.version} into {r.namespace})"

    def summary(self) -> str:
        """One line: e.g. ``tigera-operator installed (revision 1), workloads ready: Deployment ns/x 1/1``."""
        if self.status == NOT_INSTALLED:
            return f"{self.release.name}: rendered + validated, not installed: {self.message}"
        text = f"{self.release.name} {self.status}"
        if self.revision is not None:
            text += f" (revision {self.revision})"
        if self.message:
            text += f": {self.message}"
        elif self.workloads:
            text += ", workloads ready: " + ", ".join(f"{k} {v}" for k, v in self.workloads.items())
        elif self.applied:
            text += ", no workloads to watch"
        return text

    def as_fact(self) -> dict[str, Any]:
        """The journal fact: release, chart, version, namespace, revision, values digest, outcome, and the
        workloads watched (``Kind/namespace/name``: ready/wanted)."""
        r = self.release
        return {
            "release": r.name,
            "chart": r.chart,
            "version": r.version,
            "namespace": r.namespace,
            "revision": self.revision,
            "values_digest": values_digest(r.values),
            "status": self.status,
            "ok": self.ok,
            **({"message": self.message} if self.message else {}),
            **({"workloads": self.workloads} if self.workloads else {}),
        }


class HelmClient:
    """Helm's release actions on the cluster of ``kubeconfig`` (one ``helm_python.Config`` per namespace).

    ``timeout_s`` bounds each install/upgrade (Helm's own ``timeout``; rackctl watches readiness itself).
    """

    def __init__(self, kubeconfig: Path, *, timeout_s: float) -> None:
        self.helm = helm_sdk()
        self.kubeconfig = kubeconfig
        self.timeout_s = max(1, int(timeout_s))
        self._configs: dict[str, Any] = {}

    def _config(self, namespace: str) -> Any:
        if namespace not in self._configs:
            self._configs[namespace] = self.helm.Config(kubeconfig_path=str(self.kubeconfig), namespace=namespace)
        return self._configs[namespace]

    def close(self) -> None:
        for config in self._configs.values():
            config.close()
        self._configs.clear()

    def current(self, release: Release) -> dict[str, Any] | None:
        """Helm's latest revision of ``release`` (any status), or ``None`` when Helm has no record of it."""
        try:
            history = self._config(release.namespace).history(release.name)
        except self.helm.HelmNotFoundError:
            return None
        latest: dict[str, Any] | None = max(history, key=lambda h: int(h["revision"])) if history else None
        return latest

    def user_values(self, release: Release) -> Any:
        """The user-supplied values of the release's latest revision (``helm get values``)."""
        return self._config(release.namespace).get_values(release.name)

    def manifest(self, release: Release) -> str:
        """The manifest Helm stored for the release's latest revision (``helm get manifest``)."""
        return str(self._config(release.namespace).status(release.name).get("manifest") or "")

    def rollback(self, release: Release, revision: int) -> None:
        """``helm rollback RELEASE REVISION``: a new revision with that one's chart and values."""
        self._config(release.namespace).rollback(release.name, version=revision, timeout=self.timeout_s)

    def uninstall(self, release: Release) -> None:
        """``helm uninstall RELEASE`` (history not kept: a failed install leaves nothing)."""
        self._config(release.namespace).uninstall(release.name, timeout=self.timeout_s, ignore_not_found=True)

    def install(self, release: Release, source: Path) -> dict[str, Any]:
        return self._run("install", release, source, create_namespace=True, description="installed by rackctl")

    def upgrade(self, release: Release, source: Path) -> dict[str, Any]:
        return self._run("upgrade", release, source, reset_values=True, description="upgraded by rackctl")

    def _run(self, action: str, release: Release, source: Path, **options: Any) -> dict[str, Any]:
        """Helm's ``install`` or ``upgrade`` of ``release`` from the chart at ``source`` (closed afterwards)."""
        chart = self.helm.Chart.load(source)
        try:
            run = getattr(self._config(release.namespace), action)
            done: dict[str, Any] = run(
                chart, release.name, release.values, namespace=release.namespace, timeout=self.timeout_s, **options
            )
        finally:
            chart.close()
        return done


def blocked_state(release: Release, current: dict[str, Any]) -> str:
    """Why a release in a state other than ``deployed`` is left alone, and what to do."""
    name, ns, status, revision = release.name, release.namespace, current.get("status"), current.get("revision")
    where = f"Helm reports release {name} in {ns} {status} at revision {revision}"
    history = f"`helm history {name} -n {ns}` shows its revisions"
    if str(status).startswith("pending-"):
        return (
            f"{where}: another Helm operation on it is running or was interrupted; wait for it to finish, or, if "
            f"none runs, `helm rollback {name} -n {ns}` to the last deployed revision ({history}) or "
            f"`helm uninstall {name} -n {ns}` when it never deployed, then run again"
        )
    if status == "failed":
        return (
            f"{where}: its last install/upgrade failed and rackctl does not upgrade a failed release; find the cause "
            f"({history}; `kubectl get events -n {ns}`), then `helm rollback {name} -n {ns}` to the last deployed "
            f"revision, or `helm uninstall {name} -n {ns}` when it never deployed, and run again"
        )
    return f"{where}: rackctl installs or upgrades only a release that is absent or deployed; {history}"


def helm_message(exc: Exception, release: Release) -> str:
    """Helm's error, redacted, with the inventory fields that feed the release's values."""
    return redact(f"Helm refused it: {exc} (values from {', '.join(release.sources)})")


def ensure_release(client: HelmClient, release: Release, source: Path) -> ReleaseOutcome:
    """Install, upgrade or leave ``release`` as it is (see the module's docstring); Helm errors are outcomes."""
    helm = client.helm
    action, prior = "", None
    try:
        current = client.current(release)
        if current is None:
            action = "install"
            done = client.install(release, source)
            return ReleaseOutcome(release, INSTALLED, int(done["revision"]), action=action)
        revision = int(current["revision"])
        if current.get("status") != DEPLOYED:
            return ReleaseOutcome(release, REFUSED, revision, blocked_state(release, current), ok=False)
        same_chart = current.get("chart_name") == release.chart and str(current.get("chart_version")).removeprefix(
            "v"
        ) == release.version.removeprefix("v")
        if same_chart and client.user_values(release) == _plain(release.values):
            return ReleaseOutcome(release, UNCHANGED, revision)
        action, prior = "upgrade", revision
        done = client.upgrade(release, source)
        return ReleaseOutcome(release, UPGRADED, int(done["revision"]), action=action, prior=prior)
    except helm.HelmError as exc:
        after = _revision_after_error(client, release)
        failed = ReleaseOutcome(release, FAILED, after, helm_message(exc, release), ok=False)
        failed.action, failed.prior = action, prior
        return failed


def undo(client: HelmClient, outcome: ReleaseOutcome) -> ReleaseOutcome:
    """Helm's ``--atomic`` for a failed install or upgrade (Helm's error, or workloads not ready in time): the
    upgrade rolled back to the revision before it (history kept), the install uninstalled (nothing of it left,
    the next run installs it again). The outcome stays failed; its message says what was undone."""
    release = outcome.release
    try:
        if outcome.action == "upgrade" and outcome.prior is not None:
            client.rollback(release, outcome.prior)
            current = client.current(release)
            outcome.status, outcome.revision = ROLLED_BACK, int(current["revision"]) if current else None
            outcome.message += f"; rolled back to revision {outcome.prior} (Helm's revision {outcome.revision} now)"
        elif outcome.action == "install":
            client.uninstall(release)
            outcome.status, outcome.revision = UNINSTALLED, None
            outcome.message += "; uninstalled (Helm's --atomic: nothing of it is left, the next run installs it again)"
    except client.helm.HelmError as exc:
        outcome.message += f"; undoing it failed too: {redact(str(exc))}"
    outcome.ok = False
    return outcome


def _revision_after_error(client: HelmClient, release: Release) -> int | None:
    """The revision Helm recorded for a failed action (it keeps failed installs/upgrades), if any."""
    try:
        current = client.current(release)
    except client.helm.HelmError:
        return None
    return int(current["revision"]) if current else None


def workloads_of(manifest: str, namespace: str) -> list[tuple[str, str, str]]:
    """The ``(kind, namespace, name)`` of every workload in a release's manifest (:data:`WORKLOAD_KINDS`; objects
    without a namespace are in the release's)."""
    out = []
    for doc in yaml.safe_load_all(manifest):
        if isinstance(doc, dict) and doc.get("kind") in WORKLOAD_KINDS and _judged(doc):
            meta = doc.get("metadata") or {}
            out.append((str(doc["kind"]), str(meta.get("namespace") or namespace), str(meta.get("name"))))
    return out


def _judged(doc: dict[str, Any]) -> bool:
    """A workload kind of its own API group (a ``Prometheus`` only the Prometheus operator's)."""
    return doc["kind"] not in OPERATED_KINDS or str(doc.get("apiVersion", "")).startswith("monitoring.coreos.com/")


def _watched(states: dict[tuple[str, str, str], WorkloadRollout]) -> dict[str, str]:
    return {f"{k}/{ns}/{name}": f"{s.ready}/{s.wanted}" for (k, ns, name), s in states.items()}


def _watch(client: HelmClient, api: LiveApi, outcome: ReleaseOutcome, timeout_s: float) -> ReleaseOutcome:
    """Watch the workloads Helm rendered for the release to ready; not ready in time fails the outcome."""
    release = outcome.release
    try:
        workloads = workloads_of(client.manifest(release), release.namespace)
        states = watch_workloads(api, workloads, timeout_s=timeout_s)
    except (client.helm.HelmError, RackctlError) as exc:  # Helm's record or the API unreadable meanwhile
        outcome.ok = False
        outcome.message = redact(f"its workloads could not be read: {exc}")
        return outcome
    outcome.workloads = _watched(states)
    late = [s for s in states.values() if not s.done]
    if late:
        outcome.ok = False
        outcome.message = f"not ready within {timeout_s:g} s: " + "; ".join(
            f"{s.kind} {s.namespace}/{s.name}: {s.why}" for s in late
        )
    return outcome


def _established(crd: dict[str, Any] | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def wait_established(api: LiveApi, names: list[str], timeout_s: float) -> list[str]:
    """The CRDs of ``names`` the API server has not established within ``timeout_s`` (empty: all serve)."""
    deadline = time.monotonic() + timeout_s
    waiting = list(names)
    while waiting:
        waiting = [n for n in waiting if not _established(api.get_object("CustomResourceDefinition", n))]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(ESTABLISHED_POLL_S)
    return waiting


def apply_rendered(api: LiveApi, release: Release, source: Path, timeout_s: float) -> ReleaseOutcome:
    """A ``server-side`` release: its chart rendered (``helm template``), every object applied server-side as
    rackctl (re-applying changes only what differs), its CRDs waited for until established."""
    rendered = render_release(release, source)
    if rendered.problems:
        why = "; ".join(f"{p.message} (fix: {p.fix})" for p in rendered.problems)
        return ReleaseOutcome(release, FAILED, message=why, ok=False)
    objects = [o for docs in (*rendered.crds.values(), *rendered.manifests.values()) for o in docs]
    try:
        applied = apply_objects(api, objects)
    except RackctlError as exc:
        return ReleaseOutcome(release, FAILED, message=redact(str(exc)), ok=False)
    if applied.not_applied:
        return ReleaseOutcome(release, FAILED, message=applied.summary(), ok=False)
    crds = [o["metadata"]["name"] for o in objects if o.get("kind") == "CustomResourceDefinition"]
    late = wait_established(api, crds, timeout_s)
    if late:
        why = f"{applied.summary()}; not established within {timeout_s:g} s: CustomResourceDefinition {', '.join(late)}"
        return ReleaseOutcome(release, FAILED, message=why, ok=False)
    established = f", {len(crds)} CRD(s) established" if crds else ""
    return ReleaseOutcome(release, APPLIED, message=f"{applied.summary()}{established}")


@dataclass
class HelmReport:
    """Every release's outcome, in install order."""

    outcomes: list[ReleaseOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def failed(self) -> list[ReleaseOutcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> str:
        return "; ".join(o.summary() for o in self.outcomes)


def install_releases(
    releases: list[Release],
    *,
    kubeconfig: Path,
    api: LiveApi,
    charts_dir: Path | None,
    timeout_s: float,
    log: Callable[[str], None] = lambda _: None,
) -> HelmReport:
    """Install or upgrade ``releases`` in order with Helm on the cluster of ``kubeconfig``; watch each one's
    workloads through ``api`` up to ``timeout_s``. Stops at the first failure (the rest: "not attempted")."""
    report = HelmReport()
    client: HelmClient | None = None
    try:
        for release in releases:
            if report.failed:
                why = f"{report.failed[0].release.name} failed before it"
                report.outcomes.append(ReleaseOutcome(release, NOT_ATTEMPTED, message=why, ok=False))
                continue
            source = chart_source(charts_dir, release) if charts_dir is not None else None
            if source is None:
                where = f"not in --charts {charts_dir}" if charts_dir is not None else "not at hand (no --charts DIR)"
                missing = f"chart {release.chart} {release.version} {where}"
                report.outcomes.append(ReleaseOutcome(release, NOT_INSTALLED, message=missing))
                continue
            if release.install == "server-side":
                log(f"helm: template {release.name} ({release.chart} {release.version}), applied server-side")
                outcome = apply_rendered(api, release, source, timeout_s)
                log(f"helm: {outcome.summary()}")
                report.outcomes.append(outcome)
                continue
            client = client or HelmClient(kubeconfig, timeout_s=timeout_s)
            log(f"helm: install/upgrade {release.name} ({release.chart} {release.version}) into {release.namespace}")
            outcome = ensure_release(client, release, source)
            if outcome.ok:
                outcome = _watch(client, api, outcome, timeout_s)
            if not outcome.ok and outcome.action:
                log(f"helm: {release.name}: {outcome.message}; undoing the {outcome.action}")
                outcome = undo(client, outcome)
            log(f"helm: {outcome.summary()}")
            report.outcomes.append(outcome)
    finally:
        if client is not None:
            client.close()
    return report
