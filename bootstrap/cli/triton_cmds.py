"""``rackctl triton``: render, check, load-check, manifests and smoke for Triton model repositories."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.progress import Progress

from bootstrap.cli import flags
from bootstrap.cli.common import console, emit, err_console, handle_errors
from bootstrap.cli.triton_deliver import deliver_cmd
from bootstrap.errors import EXIT_FAILED, InvalidInput, Problem
from bootstrap.kube import KUBECONFIG
from bootstrap.kube.service_proxy import KubectlProxy, parse_service, service_path
from bootstrap.stages.triton.smoke import PORT, VIA
from bootstrap.triton.check import check_model_dir, model_dirs
from bootstrap.triton.client import load_check_modules
from bootstrap.triton.manifests import DEFAULT_K8S_VERSION, write_manifests
from bootstrap.triton.render import render_all
from bootstrap.triton.smoke import DEFAULT_PROMPT, SmokeResult, run_smoke
from bootstrap.triton.stage import load_scaling, load_specs
from bootstrap.triton.weights_version import served_specs

#: the repositories live under ``<state-dir>/triton`` unless ``--out``/DIRECTORY says otherwise
TRITON_SUBDIR = "triton"
#: ``triton smoke`` without ``--url`` or ``--service``
DEFAULT_URL = "127.0.0.1:8000"


def models_option(func: Any) -> Any:
    return click.option(
        "--models",
        "models_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help="YAML file with a `models:` list (instead of the inventory's).",
    )(func)


def out_option(func: Any) -> Any:
    """``-o/--out`` (default ``<state-dir>/triton``) and ``--state-dir``."""
    return flags.state_dir(flags.out(TRITON_SUBDIR, "Directory holding one sub-directory per model")(func))


def dir_argument(func: Any) -> Any:
    """DIRECTORY (default ``<state-dir>/triton``) and ``--state-dir``."""
    func = click.argument("directory", type=click.Path(path_type=Path, file_okay=False), default=None, required=False)(
        func
    )
    return flags.state_dir(func)


def _repos(directory: Path | None, state_dir: Path) -> Path:
    return flags.out_dir(directory, state_dir, TRITON_SUBDIR)


def _parse_path_map(values: tuple[str, ...]) -> dict[str, Path]:
    mapping = {}
    for value in values:
        pod, sep, local = value.partition("=")
        if not sep or not pod.startswith("/") or not local:
            raise InvalidInput(
                f"bad --path-map {value!r}",
                problems=[Problem("--path-map", f"got {value!r}", "use POD_PREFIX=LOCAL_DIR, e.g. /models=/mnt/nfs")],
            )
        mapping[pod] = Path(local)
    return mapping


def _found_dirs(directory: Path, only: tuple[str, ...]) -> list[Path]:
    dirs = [d for d in model_dirs(directory) if not only or d.name in only]
    if not dirs:
        raise InvalidInput(
            f"no rendered model in {directory}",
            problems=[Problem(str(directory), "no rackctl-model.json found", "run `rackctl triton render` first")],
        )
    return dirs


def _print_files(data: dict[str, Any]) -> None:
    verb = "would write" if data["dry_run"] else "wrote"
    for item in data["models"]:
        console.print(f"[bold]{escape(item['model'])}[/bold]: {verb} {len(item['files'])} files")
        if item.get("weights_version"):
            console.print(f"  weights version: {escape(item['weights_version'])}")
        for path in item["files"]:
            console.print(f"  {escape(path)}")
        for problem in item.get("problems", []):
            console.print(f"  [red]{escape(problem['path'])}: {escape(problem['message'])}[/red]")


@click.group("triton")
def triton() -> None:
    """Triton + TensorRT-LLM model repositories: render, check, load, deploy, smoke-test."""


triton.add_command(deliver_cmd)


@triton.command("render")
@flags.inventory
@models_option
@out_option
@flags.plan("Show what would be written; write nothing.", "dry_run")
@flags.json
@handle_errors()
def render_cmd(  # noqa: PLR0917 - click passes options as arguments
    inventory_path: Path, models_file: Path | None, out_dir: Path | None, state_dir: Path, dry_run: bool, as_json: bool
) -> None:
    """Write each declared model's Triton repository from rackctl's templates."""
    out_dir = _repos(out_dir, state_dir)
    specs = served_specs(load_specs(inventory_path, models_file), state_dir)
    results = []
    with Progress(console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task("rendering", total=len(specs))
        for spec in specs:
            results += render_all([spec], out_dir, dry_run=dry_run)
            progress.advance(task)
    emit({"ok": True, "dry_run": dry_run, "models": results}, as_json, _print_files)


@triton.command("manifests")
@flags.inventory
@models_option
@out_option
@click.option("--k8s-version", default=DEFAULT_K8S_VERSION, show_default=True, help="Schemas to validate against.")
@flags.plan("Show what would be written; write nothing.", "dry_run")
@flags.json
@handle_errors()
def manifests_cmd(
    *,
    inventory_path: Path,
    models_file: Path | None,
    out_dir: Path | None,
    state_dir: Path,
    k8s_version: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Write Kubernetes manifests per model, validated with kubernetes-validate --strict."""
    out_dir = _repos(out_dir, state_dir)
    specs = served_specs(load_specs(inventory_path, models_file), state_dir)
    scaling = load_scaling(inventory_path, models_file)
    results = write_manifests(specs, out_dir, dry_run=dry_run, k8s_version=k8s_version, scaling=scaling)
    ok = not any(r["problems"] for r in results)
    emit({"ok": ok, "dry_run": dry_run, "models": results}, as_json, _print_files)
    if not ok:
        sys.exit(EXIT_FAILED)


@triton.command("check")
@dir_argument
@click.option("--model", "only", multiple=True, help="Check only this model (repeatable).")
@click.option("--path-map", multiple=True, help="POD_PREFIX=LOCAL_DIR: where pod paths (engines) are here.")
@click.option("--skip-engine", is_flag=True, help="Do not read the engines' config.json.")
@flags.json
@handle_errors()
def check_cmd(  # noqa: PLR0917 - click passes options as arguments
    directory: Path | None,
    state_dir: Path,
    only: tuple[str, ...],
    path_map: tuple[str, ...],
    skip_engine: bool,
    as_json: bool,
):
    """Parse every config.pbtxt with Triton's protobuf definitions and run the cross-model checks."""
    mapping = _parse_path_map(path_map)
    results = []
    for model_dir in _found_dirs(_repos(directory, state_dir), only):
        found = check_model_dir(model_dir, path_map=mapping, skip_engine=skip_engine)
        results.append(
            {
                "model": found.model,
                "checked": found.checked,
                "problems": [p.as_dict() for p in found.problems],
            }
        )
    ok = not any(r["problems"] for r in results)

    def human(data: dict[str, Any]) -> None:
        for item in data["models"]:
            mark = "[green]ok[/green]" if not item["problems"] else "[red]FAILED[/red]"
            console.print(f"{mark} {escape(item['model'])} ({', '.join(item['checked'])})")
            for p in item["problems"]:
                fix = f" [dim](fix: {escape(p['fix'])})[/dim]" if p.get("fix") else ""
                console.print(f"  - {escape(p['path'])}: {escape(p['message'])}{fix}")

    emit({"ok": ok, "models": results}, as_json, human)
    if not ok:
        sys.exit(EXIT_FAILED)


@triton.command("load-check")
@dir_argument
@click.option("--model", "only", multiple=True, help="Load only this model (repeatable).")
@click.option(
    "--tokenizer-dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Local tokenizer directory (default: a tiny tokenizer built offline).",
)
@flags.json
@handle_errors()
def load_check_cmd(
    directory: Path | None, state_dir: Path, only: tuple[str, ...], tokenizer_dir: Path | None, as_json: bool
) -> None:
    """Load each rendered repository in the real tritonserver on CPU (tensorrt_llm replaced by a stand-in)."""
    load_check_modules()  # the `load-check` extra: exit 3 naming it when missing
    from bootstrap.triton.loadcheck import load_check  # noqa: PLC0415 - needs the `triton` extra
    from bootstrap.triton.server import find_tritonserver  # noqa: PLC0415 - needs the `triton` extra

    find_tritonserver()  # exit 3 with the fix when the wheel is missing
    results = []
    for model_dir in _found_dirs(_repos(directory, state_dir), only):
        with err_console.status(f"loading {model_dir.name} in tritonserver", spinner="dots"):
            results.append(load_check(model_dir, tokenizer_dir=tokenizer_dir))
    ok = all(r["ok"] for r in results)

    def human(data: dict[str, Any]) -> None:
        for item in data["models"]:
            mark = "[green]ok[/green]" if item["ok"] else "[red]FAILED[/red]"
            load = f" loaded in {item['load_seconds']} s" if "load_seconds" in item else ""
            console.print(f"{mark} {escape(item['model'])}{load}")
            for error in item["errors"]:
                console.print(f"  - {escape(error)}")
            if item.get("triton_log"):
                console.print("  (the full tritonserver log is in the --json output, key triton_log)")

    emit({"ok": ok, "models": results}, as_json, human)
    if not ok:
        sys.exit(EXIT_FAILED)


def _smoke_target(url: str | None, service: str | None, state_dir: Path, kubeconfig: Path | None) -> Path | None:
    """Check ``--url``/``--service``: at most one; with ``--service`` the kubeconfig to reach the API server."""
    if url is not None and service is not None:
        raise InvalidInput(
            "give --url or --service, not both",
            problems=[
                Problem("--url/--service", f"got --url {url!r} and --service {service!r}", "pass only one of them")
            ],
        )
    if service is None:
        return None
    parse_service(service)
    path = kubeconfig or state_dir / KUBECONFIG
    if not path.is_file():
        raise InvalidInput(
            f"no kubeconfig at {path}",
            problems=[
                Problem(
                    "--kubeconfig" if kubeconfig else "--state-dir",
                    f"{path} is not a file",
                    "pass --kubeconfig FILE, or the --state-dir whose kubeconfig reaches the cluster",
                )
            ],
        )
    return path


#: characters of the answer the human output shows (the line within 80 columns; --json has it whole)
ANSWER_SHOWN = 50


def load_lines(load: dict[str, Any]) -> list[str]:
    """``--load``'s counts, each line within 80 columns: time, requests, rate, clients, failures; latency."""
    rate = load["requests"] / load["ran_s"] if load["ran_s"] else 0.0
    early = ", stopped early" if load["interrupted"] else ""
    lines = [
        f"load ({load['ran_s']:.0f} s{early}): {load['requests']} requests, {rate:.1f}/s, "
        f"{load['concurrency']} clients, {load['failed']} failed"
    ]
    if load["p50_s"] is not None:
        lines.append(f"  latency p50 {load['p50_s'] * 1000:.0f} ms, p95 {load['p95_s'] * 1000:.0f} ms")
    return lines


@triton.command("smoke")
@click.option("--url", default=None, help="Triton HTTP endpoint, HOST:PORT[/PREFIX] [default: 127.0.0.1:8000].")
@click.option(
    "--service",
    metavar="NS/NAME",
    default=None,
    help="Instead of --url: the Service NS/NAME through the Kubernetes API server's service proxy "
    "(needs only the kubeconfig; runs `kubectl proxy` for the duration).",
)
@click.option("--port", "port_name", default=PORT, show_default=True, help="With --service: the Service port's name.")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"With --service: the kubeconfig [default: <state-dir>/{KUBECONFIG}].",
)
@flags.state_dir
@click.option("--model", default="ensemble", show_default=True, help="Model to send the requests to.")
@click.option("--prompt", default=DEFAULT_PROMPT, show_default=True)
@click.option("--max-tokens", type=click.IntRange(1, 65536), default=32, show_default=True)
@click.option("--stream/--no-stream", default=True, show_default=True, help="Also send a streaming request.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True)
@click.option(
    "--load",
    "load_s",
    type=click.FloatRange(1, 86400),
    default=None,
    metavar="SECONDS",
    help="Then keep --concurrency clients sending generate requests for this long (Ctrl-C ends it early).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="With --load: clients sending at once.",
)
@flags.json
@handle_errors()
def smoke_cmd(
    *,
    url: str | None,
    service: str | None,
    port_name: str,
    kubeconfig: Path | None,
    state_dir: Path,
    model: str,
    prompt: str,
    max_tokens: int,
    stream: bool,
    timeout: float,
    load_s: float | None,
    concurrency: int,
    as_json: bool,
) -> None:
    """Send a generate (and a streaming) request; report time to first token and total latency. With --load,
    then a steady load from --concurrency clients (an autoscaled model's queue grows with it): its requests,
    failures and latency percentiles.

    With --service the requests go through the API server's service proxy
    (/api/v1/namespaces/NS/services/NAME:PORT/proxy/): the times include kubectl proxy and the API server."""
    config = _smoke_target(url, service, state_dir, kubeconfig)
    extra: dict[str, Any] = {}

    def smoke(target: str, where: str) -> SmokeResult:
        with err_console.status(f"asking {where}", spinner="dots") as status:
            return run_smoke(
                target,
                model=model,
                prompt=prompt,
                max_tokens=max_tokens,
                stream=stream,
                timeout=timeout,
                load_s=load_s,
                concurrency=concurrency,
                progress=lambda msg: status.update(f"load on {where}: {msg}"),
            )

    if config is not None and service is not None:
        namespace, name = parse_service(service)
        with KubectlProxy(config) as proxy:
            result = smoke(proxy.service_url(namespace, name, port_name), f"Service {service}")
        path = service_path(namespace, name, port_name) + "/"
        result.url = path  # kubectl proxy's own address is gone with it
        extra = {"service": f"{namespace}/{name}:{port_name}", "via": VIA, "kubeconfig": str(config)}
    else:
        target = url or DEFAULT_URL
        result = smoke(target, target)

    def human(data: dict[str, Any]) -> None:
        mark = "[green]ok[/green]" if data["ok"] else "[red]FAILED[/red]"
        where = f"Service {data['service']} ({data['url']}, via {data['via']})" if "service" in data else data["url"]
        console.print(f"{mark} {escape(where)} model {escape(data['model'])}")
        if data["latency_s"] is not None:
            text = data["text"] if len(data["text"]) <= ANSWER_SHOWN else data["text"][: ANSWER_SHOWN - 3] + "..."
            console.print(f"  generate: {data['latency_s'] * 1000:.1f} ms: {escape(text)!r}")
        if data["ttft_s"] is not None:
            console.print(
                f"  generate_stream: first token {data['ttft_s'] * 1000:.1f} ms, "
                f"total {data['stream_latency_s'] * 1000:.1f} ms, {data['stream_chunks']} chunks"
            )
        for line in load_lines(data["load"]) if data["load"] is not None else []:
            console.print(f"  {line}")
        for error in data["errors"]:
            console.print(f"  - [red]{escape(error)}[/red]")

    emit({**result.as_dict(), **extra}, as_json, human)
    if not result.ok:
        sys.exit(EXIT_FAILED)


def register(cli: click.Group) -> None:
    """Add the ``triton`` group to the root command."""
    cli.add_command(triton)
