"""``rackctl lab components``: build the inventory's Kubernetes release and its companions (cached)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, err_console, escape, handle_errors
from rackctl_lab.components.pins import CRD_SOURCES, GROUPS


@click.command("components")
@flags.inventory
@click.option(
    "--only",
    multiple=True,
    metavar="GROUP|NAME",
    help=f"Build only these groups ({', '.join(GROUPS)}) or programs; repeatable.",
)
@click.option(
    "--kubernetes",
    metavar="VERSION",
    help="Build this release instead of the inventory's cluster.versions.kubernetes (the lab's own tests).",
)
@flags.plan("List the pins and what the cache has; build nothing.", dest="show_plan")
@click.option(
    "--packages",
    is_flag=True,
    help="Also package kubeadm, kubelet, kubectl and crictl as .debs in a signed flat repository shaped like "
    "pkgs.k8s.io (the Kubernetes upstream of a lab mirror build).",
)
@click.option(
    "--crds",
    is_flag=True,
    help="Also generate the CRDs pinned in pins.py (KEDA's keda.sh/v1alpha1) from their Go API types with "
    "controller-gen (the tests load them into the real API server).",
)
@flags.json
@handle_errors()
def components_cmd(  # noqa: PLR0917 - click passes every option
    inventory_path: Path,
    only: tuple[str, ...],
    kubernetes: str | None,
    show_plan: bool,
    packages: bool,
    crds: bool,
    as_json: bool,
) -> None:
    """Build the Kubernetes release the inventory names (cluster.versions.kubernetes) from its Go modules.

    kubeadm, kubelet, kubectl, the control plane, kube-proxy, etcd, crictl, CoreDNS and Helm, each at the
    exact module version pinned in rackctl_lab/components/pins.py, built once with `go build` and cached
    under ~/.cache/rackctl/components (or $RACKCTL_CACHE). --kubernetes names the release instead of the
    inventory (scripts/test.sh builds the tests' API server, etcd, kubectl and kubeadm so). --packages
    makes the lab's Kubernetes packages from them (rackctl_lab/components/debs.py): point
    site_services.packages.upstreams.kubernetes (uri, key_file) at the repository it prints. --crds generates
    KEDA's CRDs from its API types at the pinned version (controller-gen, built the same way).
    """
    from bootstrap.inventory import load_inventory  # noqa: PLC0415 - fast --help
    from rackctl_lab.components import build  # noqa: PLC0415

    if kubernetes:
        release = build.release_for(kubernetes, "--kubernetes")
    else:
        release = build.release_for(load_inventory(inventory_path).cluster.resolved_versions().kubernetes)
    selected = build.select(release, only)
    if packages:
        from rackctl_lab.components import debs  # noqa: PLC0415

        names = {p.name for p in selected}
        selected += [p for p in build.select(release, debs.PROGRAMS) if p.name not in names]
    if show_plan:
        go = build.go_version()
        emit(
            {"ok": True, "plan": True, "kubernetes": release.version, "go": go, "programs": build.plan(selected, go)},
            as_json,
            _show_plan,
        )
        return
    start = time.monotonic()
    progress = (lambda _m: None) if as_json else (lambda m: err_console.print(escape(m)))
    done = build.build(selected, progress=progress)
    data = {
        "ok": True,
        "kubernetes": release.version,
        "go": build.go_version(),
        "seconds": round(time.monotonic() - start, 1),
        "programs": [b.as_dict() for b in done],
    }
    if crds:
        data["crds"] = [build.generate_crds(source, progress=progress).as_dict() for source in CRD_SOURCES.values()]
        data["seconds"] = round(time.monotonic() - start, 1)
    if packages:
        progress("packaging kubeadm, kubelet, kubectl and crictl")
        repository = debs.repository(release, {b.name: Path(b.path) for b in done})
        data["repository"] = repository.as_dict()
        data["seconds"] = round(time.monotonic() - start, 1)
    emit(data, as_json, _show_built)


def _show_plan(data: dict[str, Any]) -> None:
    table = Table(title=f"Kubernetes {data['kubernetes']} components ({data['go']}): would build")
    for col in ("program", "version", "module", "cache"):
        table.add_column(col)
    for p in data["programs"]:
        table.add_row(p["name"], p["version"], p["module"], "cached" if p["cached"] else "to build")
    console.print(table)


def _show_built(data: dict[str, Any]) -> None:
    table = Table(title=f"Kubernetes {data['kubernetes']} components ({data['go']})")
    for col in ("program", "version", "build"):
        table.add_column(col)
    for p in data["programs"]:
        table.add_row(p["name"], p["version"], "cached" if p["cached"] else f"{p['seconds']:.0f} s")
    console.print(table)
    built = sum(1 for p in data["programs"] if not p["cached"])
    console.print(f"{built} built, {len(data['programs']) - built} cached, {data['seconds']:.0f} s in all")
    for generated in data.get("crds", []):
        how = "cached" if generated["cached"] else f"{generated['seconds']:.0f} s"
        console.print(
            f"{generated['name']} CRDs {generated['version']} ({generated['generator']}, {how}): "
            f"{len(generated['files'])} file(s) in {escape(str(Path(generated['files'][0]).parent))}",
            soft_wrap=True,
        )
    repository = data.get("repository")
    if repository:
        console.print(f"packages: {escape(repository['root'])}", soft_wrap=True)
        console.print(f"its key: {escape(repository['public_key'])}", soft_wrap=True)
