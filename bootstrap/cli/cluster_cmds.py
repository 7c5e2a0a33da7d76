"""``rackctl render cluster`` and ``rackctl validate-cluster``: the cluster checked before and after it exists."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.progress import Progress

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, err_console, escape, handle_errors
from bootstrap.errors import EXIT_FAILED, InvalidInput, Problem
from bootstrap.inventory.loader import load_inventory

if TYPE_CHECKING:  # imported where used: the command loads them only when it runs
    from bootstrap.inventory.models import Inventory
    from bootstrap.validation.checks import GpuNodeFacts
    from bootstrap.validation.report import ClusterReport
    from bootstrap.validation.workloads import Settings

#: A Kubernetes namespace name (DNS-1123 label).
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@click.group("render")
def render() -> None:
    """Render what the stages would apply, checked, without touching a node."""


@render.command("cluster")
@flags.inventory
@click.option(
    "-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False), help="Output directory."
)
@flags.directory(
    "--crds",
    "crd_dir",
    "Directory of CRD YAML (the pinned charts' crds/) to check custom resources against.",
    must_exist=True,
)
@flags.directory(
    "--charts",
    "charts_dir",
    "Directory of the pinned chart archives (<chart>-<version>.tgz) to render with our values.",
    must_exist=True,
)
@flags.plan("Render and validate; write nothing.", "dry_run")
@flags.json
@handle_errors()
def render_cluster_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, out_dir: Path, crd_dir: Path | None, charts_dir: Path | None, dry_run: bool, as_json: bool
) -> None:
    """Write kubeadm configs, static pods, chart values, node labels and Triton manifests, validated, with an index.

    Nothing is applied: the directory is what the kubernetes and nvidia stages would apply.
    """
    from bootstrap.cluster.render import render_cluster, write_bundle  # noqa: PLC0415 - heavy, only on use
    from bootstrap.cluster.validate import validate_bundle  # noqa: PLC0415

    inv = load_inventory(inventory_path)
    with Progress(console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task("rendering", total=3)
        bundle = render_cluster(inv, charts_dir)
        progress.advance(task)
        progress.update(task, description="validating")
        problems = validate_bundle(inv, bundle, crd_dir)
        progress.advance(task)
        if problems:
            raise InvalidInput(
                f"the rendered cluster has {len(problems)} problem(s); nothing was written", problems=problems
            )
        if not dry_run:
            progress.update(task, description="writing")
            write_bundle(bundle, out_dir)
        progress.advance(task)
    data = {
        "ok": True,
        "dry_run": dry_run,
        "applied": False,
        "out": str(out_dir),
        "index": str(out_dir / "index.json"),
        **bundle.index(),
    }
    emit(data, as_json, _print_render)


def _print_render(data: dict[str, Any]) -> None:
    verb = "would write" if data["dry_run"] else "wrote"
    console.print(
        f"{verb} {len(data['files'])} files to {escape(data['out'])} "
        f"(Kubernetes {escape(data['kubernetes_version'])}, {escape(data['kubeadm_api'])}); "
        "rendered and validated only, nothing applied"
    )
    for item in data["files"]:
        checks = "; ".join(item["checked_by"]) or "not schema-checked"
        console.print(f"  {escape(item['path'])}  [dim]{escape(checks)}[/dim]")
    for note in data["corrections"]:
        console.print(f"[yellow]corrected:[/yellow] {escape(note)}")
    for item in data["not_rendered"]:
        console.print(f"[yellow]not done:[/yellow] {escape(item['what'])}: {escape(item['why'])}")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"cannot read {what}", problems=[Problem(str(path), str(exc), f"give {what}")]) from None


def _node_files(values: tuple[str, ...], option: str) -> dict[str, Path]:
    mapping = {}
    for value in values:
        node, sep, path = value.partition("=")
        if not sep or not node or not path:
            raise InvalidInput(
                f"bad {option} {value!r}",
                problems=[Problem(option, f"got {value!r}", f"use NODE=FILE, e.g. {option} gpu-01=gpu-01.out")],
            )
        mapping[node] = Path(path)
    return mapping


@click.command("validate-cluster")
@flags.inventory
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False, exists=True), help="Read nodes live.")
@click.option(
    "--nodes-json", type=click.Path(path_type=Path, dir_okay=False, exists=True), help="`kubectl get nodes -o json`."
)
@click.option("--nvidia-smi", "smi_files", multiple=True, metavar="NODE=FILE", help="`nvidia-smi -q -x` of a node.")
@click.option("--lspci", "lspci_files", multiple=True, metavar="NODE=FILE", help="`lspci -n` of a node.")
@click.option(
    "--dcgm-metrics",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="DCGM exporter text [default with --kubeconfig: read live from each GPU node's exporter pod].",
)
@click.option("--skip-dcgm", is_flag=True, help="Do not read the DCGM exporters live (with --kubeconfig).")
@click.option(
    "--skip-workloads", is_flag=True, help="Only the read-only checks: no CUDA smoke or NCCL Job (with --kubeconfig)."
)
@click.option("--nccl", is_flag=True, help="Also run nccl-tests' all_reduce_perf on every node with SXM GPUs.")
@click.option(
    "--nccl-min-busbw",
    type=click.FloatRange(min=0),
    default=None,
    metavar="GB/s",
    help="Lowest average all-reduce bus bandwidth that passes [default: 300].",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="How long the workload Jobs may take, together (image pulls included).",
)
@click.option("--keep", is_flag=True, help="Leave the workload Jobs (and their pods) in the cluster afterwards.")
@click.option(
    "--namespace", default=None, metavar="NAME", help="Namespace of the workload Jobs [default: rackctl-validate]."
)
@click.option("--cuda-image", default=None, metavar="IMAGE", help="Image of the CUDA smoke Job (a mirror's copy).")
@click.option("--nccl-image", default=None, metavar="IMAGE", help="Image of the NCCL Job (a mirror's copy).")
@flags.plan("Print the workload Jobs it would create; create nothing.")
@flags.json
@handle_errors()
def validate_cluster_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path,
    kubeconfig: Path | None,
    nodes_json: Path | None,
    smi_files: tuple[str, ...],
    lspci_files: tuple[str, ...],
    dcgm_metrics: Path | None,
    skip_dcgm: bool,
    skip_workloads: bool,
    nccl: bool,
    nccl_min_busbw: float | None,
    timeout_s: float,
    keep: bool,
    namespace: str | None,
    cuda_image: str | None,
    nccl_image: str | None,
    plan_only: bool,
    as_json: bool,
) -> None:
    """Every node Ready, GPUs allocatable as the inventory says (per MIG profile), Fabric Manager on NVSwitch nodes,
    every GPU reporting DCGM metrics; with --kubeconfig, the DCGM exporters read live through the API server's pod
    proxy and a CUDA smoke Job per GPU product (and with --nccl an NCCL all-reduce per SXM node)."""
    from bootstrap.nvidia.detect import NvSwitchReport, nvswitch_pci_slots  # noqa: PLC0415
    from bootstrap.nvidia.smi import parse  # noqa: PLC0415
    from bootstrap.validation.checks import GpuNodeFacts, validate_cluster  # noqa: PLC0415

    inv = load_inventory(inventory_path)
    if namespace is not None and not NAMESPACE_RE.match(namespace):
        raise InvalidInput(
            f"bad --namespace {namespace!r}",
            problems=[
                Problem(
                    "--namespace",
                    f"got {namespace!r}",
                    "a DNS label: a-z, 0-9 and '-', at most 63, e.g. rackctl-validate",
                )
            ],
        )
    settings = _workload_settings(
        namespace=namespace,
        timeout_s=timeout_s,
        nccl=nccl,
        nccl_min_busbw=nccl_min_busbw,
        keep=keep,
        cuda_image=cuda_image,
        nccl_image=nccl_image,
    )
    if dcgm_metrics is not None and skip_dcgm:
        raise InvalidInput(
            "--dcgm-metrics with --skip-dcgm",
            problems=[Problem("--dcgm-metrics/--skip-dcgm", "both given", "give one of them")],
        )
    if plan_only:
        _plan_workloads(inv, settings, skip_workloads, _dcgm_plan(inv, dcgm_metrics, skip_dcgm), as_json)
        return
    if (kubeconfig is None) == (nodes_json is None):
        raise InvalidInput(
            "give exactly one of --kubeconfig or --nodes-json",
            problems=[Problem("--kubeconfig/--nodes-json", "where the nodes come from", "pass one of them")],
        )
    from bootstrap.validation.live import read_nodes, read_only_once  # noqa: PLC0415

    nodes = read_nodes(kubeconfig) if kubeconfig else _read_json(nodes_json, "kubectl get nodes -o json")  # type: ignore[arg-type]
    facts: dict[str, GpuNodeFacts] = {}
    for node, path in _node_files(smi_files, "--nvidia-smi").items():
        facts.setdefault(node, GpuNodeFacts()).smi = parse(path.read_text(), str(path))
    for node, path in _node_files(lspci_files, "--lspci").items():
        facts.setdefault(node, GpuNodeFacts()).nvswitch = NvSwitchReport(pci_slots=nvswitch_pci_slots(path.read_text()))
    if dcgm_metrics is not None or kubeconfig is None or skip_dcgm:
        report = validate_cluster(inv, nodes, facts, dcgm_metrics.read_text() if dcgm_metrics else None)
        if skip_dcgm:
            report.skipped = [s for s in report.skipped if s["check"] != "dcgm-metrics"]
            report.skipped.append({"check": "dcgm-metrics", "why": "--skip-dcgm"})
    else:
        report = read_only_once(inv, kubeconfig, nodes, facts)
    if kubeconfig is None:
        report.skipped.append(
            {"check": "cuda-smoke, nccl-allreduce", "why": "no --kubeconfig: they need a live cluster"}
        )
    elif skip_workloads:
        report.skipped.append({"check": "cuda-smoke, nccl-allreduce", "why": "--skip-workloads"})
    else:
        _run_workloads(inv, kubeconfig, nodes, settings, report, as_json)
    data = report.as_dict()
    emit(data, as_json, _print_report)
    if not data["ok"]:
        raise SystemExit(EXIT_FAILED)


def _dcgm_plan(inv: Inventory, dcgm_metrics: Path | None, skip_dcgm: bool) -> dict[str, Any]:
    """What ``--plan`` says of the DCGM metrics: where they would come from (nothing is read)."""
    from bootstrap.validation.dcgm import exporter  # noqa: PLC0415

    where = exporter(inv)
    if skip_dcgm or where is None:
        return {"read": False, "why": "--skip-dcgm" if skip_dcgm else "no DCGM exporter (no GPU Operator release)"}
    if dcgm_metrics is not None:
        return {"read": False, "why": f"given as --dcgm-metrics {dcgm_metrics}"}
    return {"read": False, "would_read": f"with --kubeconfig, {where.described()}; nothing read (--plan)"}


def _workload_settings(**given: Any) -> Settings:
    """The workload checks' settings: the options given, the module's defaults for the rest."""
    from bootstrap.validation.workloads import Settings  # noqa: PLC0415

    return Settings(**{k: v for k, v in given.items() if v is not None})


def _plan_workloads(
    inv: Inventory, settings: Settings, skip_workloads: bool, dcgm: dict[str, Any], as_json: bool
) -> None:
    from bootstrap.validation.workloads import plan  # noqa: PLC0415

    if skip_workloads:
        raise InvalidInput(
            "--plan with --skip-workloads has nothing to show",
            problems=[Problem("--plan", "plans the workload Jobs only", "drop --skip-workloads, or --plan")],
        )
    the_plan = plan(inv, settings)
    data = {
        "ok": True,
        "plan": True,
        "applied": False,
        **the_plan.as_dict(settings),
        "skipped": the_plan.skipped,
        "dcgm": dcgm,
    }
    emit(data, as_json, _print_plan)


def _print_plan(data: dict[str, Any]) -> None:
    import yaml  # noqa: PLC0415

    console.print(
        f"would create {len(data['jobs'])} Job(s) in namespace {escape(data['namespace'])} "
        f"(names end in this run's id, {escape(data['run_id'])}; the next run draws another); nothing created"
    )
    for job in data["jobs"]:
        console.print(f"--- {escape(job['check'])} {escape(job['subject'])} (nodes: {escape(', '.join(job['nodes']))})")
        console.print(escape(yaml.safe_dump(job["job"], sort_keys=False)), end="")
    for skip in data["skipped"]:
        console.print(
            f"[yellow]skip[/yellow] {escape(skip['check'])} {escape(skip.get('node', ''))}: {escape(skip['why'])}"
        )
    dcgm = data["dcgm"]
    console.print(f"dcgm-metrics: {escape(dcgm.get('would_read') or 'not read: ' + dcgm['why'])}")


def _run_workloads(  # noqa: PLR0917 - the command's state, passed on
    inv: Inventory, kubeconfig: Path, nodes: dict[str, Any], settings: Settings, report: ClusterReport, as_json: bool
) -> None:
    from bootstrap.validation.live import workloads_once  # noqa: PLC0415

    with Progress(console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task("workload checks", total=None)
        workloads_once(
            inv, kubeconfig, nodes, settings, report, progress=lambda text: progress.update(task, description=text)
        )


def _print_report(data: dict[str, Any]) -> None:
    for check in data["checks"]:
        mark = "[green]ok[/green]  " if check["ok"] else "[red]FAIL[/red]"
        console.print(f"{mark} {escape(check['check'])} {escape(check['node'])}: {escape(check['message'])}")
    for skip in data["skipped"]:
        console.print(
            f"[yellow]skip[/yellow] {escape(skip['check'])} {escape(skip.get('node', ''))}: {escape(skip['why'])}"
        )
    for job in data.get("workloads", {}).get("jobs", []):
        console.print(
            f"[dim]Job {escape(data['workloads']['namespace'])}/{escape(job['name'])}: {escape(job['after'])}[/dim]"
        )
    console.print(f"{data['passed']} passed, {data['failed']} failed")


def register(cli: click.Group) -> None:
    """Add ``render`` and ``validate-cluster`` to the root command."""
    cli.add_command(render)
    cli.add_command(validate_cluster_cmd)
