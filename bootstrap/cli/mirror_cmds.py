"""``rackctl mirror``: the head node's package mirror (build, check) and registry images."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, environment_for, err_console, escape, handle_errors, phases
from bootstrap.errors import EXIT_FAILED, InvalidInput, Problem
from bootstrap.inventory import load_inventory
from bootstrap.mirror.apt_fetch import DEBIAN_ARCHIVE, DEBIAN_SECURITY, Upstream
from bootstrap.mirror.build import DEBIAN_ORIGIN, build_mirror, plan_mirror
from bootstrap.mirror.chart_images import chart_images
from bootstrap.mirror.check import check_mirror
from bootstrap.mirror.images import plan_images, push_images, required_images
from bootstrap.mirror.layout import MirrorLayout
from bootstrap.mirror.manifest import build_manifest
from bootstrap.mirror.site_vars import site_vars
from bootstrap.mirror.upstream_images import sync_upstream, upstream_images
from bootstrap.resources import roles_dir

_roles_option = click.option(
    "--roles",
    "roles_path",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="Roles whose `<role>_packages` make the manifest (default: the shipped roles).",
)


@click.group("mirror")
def mirror_group() -> None:
    """The head node's signed apt mirror of what the roles install, and its container registry."""


def _require_mirror_source(inventory: Any) -> None:
    source = inventory.site_services.packages.source
    if source != "mirror":
        raise InvalidInput(
            f"site_services.packages.source is {source!r}: nodes do not use the head node's mirror",
            problems=[Problem("site_services.packages.source", f"is {source!r}", "set it to `mirror` to build one")],
        )


@mirror_group.command("build")
@flags.inventory
@flags.state_dir
@_roles_option
@click.option(
    "--upstream",
    default=DEBIAN_ARCHIVE,
    show_default=True,
    help="The distribution archive to download from (a proxy or site mirror of it works too).",
)
@click.option(
    "--security",
    default=DEBIAN_SECURITY,
    show_default=True,
    help="The security archive (`none`: the upstream carries the security updates or there are none).",
)
@flags.plan("Resolve and show the pinned closure; download and sign nothing.", "plan")
@flags.json
@handle_errors()
def build_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path,
    state_dir: Path,
    roles_path: Path | None,
    upstream: str,
    security: str,
    plan: bool,
    as_json: bool,
) -> None:
    """Download the roles' packages (their dependency closure, pinned) and sign them into the site repository.

    Runs on a connected machine (or the head node itself) with a private apt state; the repository
    under <state-dir>/mirror/repo is replaced whole, signed by the site key (made once, kept 0600).
    Beside Debian's archive it reads the repositories site_services.packages.upstreams turns on:
    Kubernetes' pkgs.k8s.io (kubeadm, kubelet, kubectl at exactly cluster.versions.kubernetes),
    NVIDIA's CUDA repository (a host driver the inventory pins, Fabric Manager on NVSwitch models) and
    Docker's repository (containerd.io at exactly cluster.versions.containerd).
    """
    inventory = load_inventory(inventory_path)
    _require_mirror_source(inventory)
    layout = MirrorLayout(state_dir)
    manifest = build_manifest(inventory, roles_path or roles_dir())
    for name, url in (("--upstream", upstream), ("--security", security)):
        if url != "none" and not url.startswith(("http://", "https://")):
            raise InvalidInput(
                f"{name} is not an http(s) URL",
                problems=[Problem(name, repr(url), "e.g. http://deb.debian.org/debian")],
            )
    source = Upstream(archive=upstream, security=None if security == "none" else security)
    if plan:
        with phases("resolving the manifest", quiet=as_json):
            resolution = plan_mirror(layout, manifest, source)
        data = {
            "ok": True,
            "plan": True,
            "applied": False,
            "manifest": manifest.as_dict(),
            "lock": resolution.lock,
            "origins": resolution.origins,
            "repo": str(layout.repo),
        }
        emit(data, as_json, _show_plan)
        return
    uid = f"rackctl site mirror ({inventory.cluster.name}) <mirror@{inventory.cluster.domain}>"
    with phases("building the mirror", quiet=as_json) as step:
        result = build_mirror(layout, manifest, key_uid=uid, upstream=source, progress=step)
    emit({"ok": True, "applied": True, "manifest": manifest.as_dict(), **result.as_dict()}, as_json, _show_build)


def _show_upstreams(manifest: dict[str, Any]) -> None:
    for repo in manifest["upstreams"]:
        key = f"key_file {repo['key_file']}" if repo["key_file"] else f"key {repo['key_url']} ({repo['fingerprint']})"
        where = f"{repo['uri']} {repo['suite']} {repo['component']}" if repo.get("suite") else repo["uri"]
        console.print(f"upstream {escape(repo['name'])}: {escape(repo['title'])}, {escape(where)}, {escape(key)}")
    for note in manifest["upstream_notes"]:
        console.print(f"upstream {escape(note)}")


def _show_plan(data: dict[str, Any]) -> None:
    requested = data["manifest"]["packages"]
    _show_upstreams(data["manifest"])
    console.print(f"would mirror {len(data['lock'])} packages into {escape(data['repo'])} (nothing downloaded):")
    for name, version in data["lock"].items():
        origin = data["origins"].get(name, DEBIAN_ORIGIN)
        marks = [m for m in ("requested" if name in requested else "", "" if origin == DEBIAN_ORIGIN else origin) if m]
        mark = f" ({', '.join(marks)})" if marks else ""
        console.print(f"  {escape(name)} {escape(version)}{escape(mark)}")


def _show_build(data: dict[str, Any]) -> None:
    console.print(f"mirrored {data['packages']} packages into {escape(data['repo'])}")
    _show_upstreams(data["manifest"])
    for origin in sorted(set(data["origins"].values()) - {DEBIAN_ORIGIN}):
        names = [f"{n} {data['lock'][n]}" for n, o in data["origins"].items() if o == origin]
        console.print(f"  from {escape(origin)}: {escape(', '.join(names))}")
    console.print(f"signed by {data['key_fingerprint']} (public key {escape(data['public_key'])})")


@mirror_group.command("check")
@flags.inventory
@flags.state_dir
@_roles_option
@flags.json
@handle_errors()
def check_cmd(inventory_path: Path, state_dir: Path, roles_path: Path | None, as_json: bool) -> None:
    """Prove every package a role asks for is in the repository at its pinned version (touches no node)."""
    inventory = load_inventory(inventory_path)
    _require_mirror_source(inventory)
    manifest = build_manifest(inventory, roles_path or roles_dir())
    result = check_mirror(MirrorLayout(state_dir), manifest)
    emit(result.as_dict(), as_json, _show_check)
    if not result.ok:
        sys.exit(EXIT_FAILED)


def _show_check(data: dict[str, Any]) -> None:
    if data["ok"]:
        console.print(f"[green]ok[/green]: {data['checked']} requested packages in the repository, signed")
        return
    err_console.print(f"[bold red]mirror check failed[/bold red] ({len(data['problems'])} problems):")
    for p in data["problems"]:
        who = f"{p['package']} ({p.get('role') or 'lock'})" if p.get("package") else "repository"
        err_console.print(f"  - {escape(who)}: {escape(p['problem'])}; fix: {escape(p['fix'])}")


@mirror_group.command("images")
@flags.inventory
@flags.state_dir
@flags.plan("List the images, whether the registry has each, where they would go; push nothing.", "plan")
@flags.directory(
    "--from",
    "from_dir",
    "Import the upstream images the registry lacks from archives saved in DIR (names: --plan).",
    must_exist=True,
)
@flags.directory(
    "--charts",
    "charts_dir",
    "Directory of the pinned chart archives (<chart>-<version>.tgz): their rendered images are listed too.",
    must_exist=True,
)
@flags.json
@handle_errors()
def images_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, state_dir: Path, plan: bool, from_dir: Path | None, charts_dir: Path | None, as_json: bool
) -> None:
    """Fill the registry with the images the stages need: rackctl's own (built here as OCI layouts, pushed
    with skopeo) and, with --from DIR, the upstream ones (the control-plane images kubeadm pulls, containerd's
    pause, kube-vip, the operator's driver, CUDA, NCCL, Triton and, with --charts DIR, every image of the
    rendered charts) from archives saved on a connected machine. Upstream images already in the registry are
    left unchanged. A chart not in --charts is listed as such: its images are known once it is at hand.

    An upstream image's archive is DIR/<ref with '/' and ':' as '_'>.tar, written by
    `skopeo --override-os linux --override-arch amd64 copy docker://REF oci-archive:DIR/NAME.tar`
    (a docker-archive such as `docker save REF -o DIR/NAME.tar` writes works too); --plan names each.
    """
    inventory = load_inventory(inventory_path)
    environment = environment_for(inventory)
    registry = site_vars(inventory, state_dir, environment)["rackctl_registry"]
    images = required_images(inventory)
    charts = chart_images(inventory, charts_dir)
    wanted = upstream_images(inventory, charts)
    chart_list = [c.describe(charts_dir) for c in charts]
    charts_ok = not any(c.problems for c in charts)  # a chart at hand that does not render
    if plan:
        with phases("looking up the registry", quiet=as_json) as step:
            upstream = sync_upstream(wanted, registry, from_dir=from_dir, wrap=environment.wrap_command, progress=step)
        ok = all(u["ok"] for u in upstream) and charts_ok
        data = {
            "ok": ok,
            "plan": True,
            "applied": False,
            "images": plan_images(images, registry),
            "upstream": upstream,
            "charts": chart_list,
        }
        emit(data, as_json, _show_images)
        if not ok:
            sys.exit(EXIT_FAILED)
        return
    with phases("filling the registry", quiet=as_json) as step:
        results = push_images(MirrorLayout(state_dir), images, registry, wrap=environment.wrap_command, progress=step)
        upstream = sync_upstream(
            wanted, registry, from_dir=from_dir, apply=True, wrap=environment.wrap_command, progress=step
        )
    ok = all(r["ok"] for r in results + upstream) and charts_ok
    data = {"ok": ok, "applied": True, "images": results, "upstream": upstream, "charts": chart_list}
    emit(data, as_json, _show_images)
    if not ok:
        sys.exit(EXIT_FAILED)


def _show_images(data: dict[str, Any]) -> None:
    verb = "would push" if data.get("plan") else "pushed"
    for image in data["images"]:
        digest = f" {image['registry_digest']}" if "registry_digest" in image else ""
        bad = "" if image.get("ok", True) else " [red](registry digest differs)[/red]"
        console.print(f"{verb} {escape(image['image'])}{digest} ({escape(image['purpose'])}){bad}")
    for image in data["upstream"]:
        state = image["state"]
        digest = f" {image['registry_digest']}" if image.get("registry_digest") else ""
        label = escape(state) if image["ok"] else f"[red]{escape(state)}[/red]"
        console.print(
            f"{label}: {escape(image['image'])} -> "
            f"{escape(image['target'])}{digest} ({escape('; '.join(image['needed_by']))})"
        )
        if state == "absent":
            console.print(
                f"  nodes pull it from upstream; an air-gapped site imports {escape(image['archive'])} with --from DIR"
            )
        if not image["ok"]:
            err_console.print(f"  [red]{escape(image['problem'])}[/red]; fix: {escape(image['fix'])}")
    for error in dict.fromkeys(i["registry_error"] for i in data["upstream"] if i.get("registry_error")):
        err_console.print(f"[yellow]the registry did not answer[/yellow]: {escape(error)}")
    for chart in data["charts"]:
        head = f"chart {escape(chart['chart'])} {escape(chart['version'])} ({escape(chart['release'])})"
        if chart["state"] == "rendered":
            console.print(f"{head}: rendered, {len(chart['images'])} images listed above")
        else:
            console.print(f"[yellow]{head}: {escape(chart['state'])}[/yellow]: {escape(chart['note'])}")
            console.print(f"  fix: {escape(chart['fix'])}")
        if "operator_images" in chart:
            console.print(f"  [yellow]not listed[/yellow]: {escape(chart['operator_images'])}")


def register(cli: click.Group) -> None:
    """Attach ``rackctl mirror``."""
    cli.add_command(mirror_group)
