"""Check rendered model repositories: Triton's own protobuf parse, then the cross-model rules.

Each finding is a :class:`Problem` whose path names the model and the field, with the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from bootstrap.errors import Problem
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.client import model_config
from bootstrap.triton.render import LLMAPI_ARGS, PLACEHOLDER, REPOSITORY_DIR, load_written_spec

MANIFEST_FILE = "k8s/deployment.yaml"


class _Tensor(Protocol):
    name: str
    optional: bool


class _Parameter(Protocol):
    string_value: str


class _EnsembleStep(Protocol):
    model_name: str
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]


class _EnsembleScheduling(Protocol):
    step: Sequence[_EnsembleStep]


class _TransactionPolicy(Protocol):
    decoupled: bool


class ModelConfig(Protocol):
    """The fields of Triton's ``ModelConfig`` protobuf message read here (tritonclient ships no stubs)."""

    name: str
    platform: str
    max_batch_size: int
    parameters: Mapping[str, _Parameter]
    input: Sequence[_Tensor]
    output: Sequence[_Tensor]
    ensemble_scheduling: _EnsembleScheduling
    model_transaction_policy: _TransactionPolicy


@dataclass
class RepoCheck:
    """What was checked for one model and what is wrong."""

    model: str
    problems: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def add(self, where: str, message: str, fix: str) -> None:
        self.problems.append(Problem(f"models[{self.model}].{where}", message, fix))


def parse_configs(repo: Path, result: RepoCheck) -> dict[str, ModelConfig]:
    """Parse every ``<model>/config.pbtxt`` with Triton's ModelConfig message."""
    configs: dict[str, ModelConfig] = {}
    text_format, model_config_pb2 = model_config()  # the `triton` extra; exit 3 naming it when missing
    for path in sorted(repo.glob("*/config.pbtxt")):
        sub = path.parent.name
        text = path.read_text()
        try:
            config = text_format.Parse(text, model_config_pb2.ModelConfig())
        except text_format.ParseError as exc:
            result.add(f"{sub}/config.pbtxt", f"Triton cannot parse it: {exc}", "re-run `rackctl triton render`")
            continue
        if config.name and config.name != sub:
            result.add(f"{sub}.name", f"name {config.name!r} differs from its directory {sub!r}", f'name: "{sub}"')
        for key, param in config.parameters.items():
            if not param.string_value or PLACEHOLDER.search(param.string_value):
                result.add(
                    f"{sub}.parameters.{key}",
                    f"unfilled value {param.string_value!r}",
                    "give it a value (re-run `rackctl triton render`)",
                )
        configs[sub] = config
    return configs


def _io(config: ModelConfig) -> tuple[dict[str, _Tensor], dict[str, _Tensor]]:
    return {t.name: t for t in config.input}, {t.name: t for t in config.output}


def check_ensemble(
    name: str, configs: dict[str, ModelConfig], result: RepoCheck, unparsed: frozenset[str] = frozenset()
) -> None:
    """Wiring to existing inputs/outputs, required inputs fed, batch sizes consistent."""
    ens = configs[name]
    ens_inputs, ens_outputs = _io(ens)
    available = set(ens_inputs)
    produced: set[str] = set()
    for i, step in enumerate(ens.ensemble_scheduling.step):
        where = f"{name}.ensemble_scheduling.step[{i}]"
        target = configs.get(step.model_name)
        if target is None and step.model_name in unparsed:  # already reported; do not cascade
            available.update(step.output_map.values())
            produced.update(step.output_map.values())
            continue
        if target is None:
            result.add(f"{where}.model_name", f"model {step.model_name!r} is not in the repository", "fix the name")
            continue
        inputs, outputs = _io(target)
        for key, value in step.input_map.items():
            if key not in inputs:
                result.add(
                    f"{where}.input_map[{key}]",
                    f"{step.model_name} has no input {key!r} (it has {', '.join(sorted(inputs))})",
                    "map an existing input",
                )
            if value not in available:
                result.add(
                    f"{where}.input_map[{key}]",
                    f"tensor {value!r} is neither an ensemble input nor an earlier step's output",
                    "map it to an ensemble input or an earlier output",
                )
        for req in (n for n, t in inputs.items() if not t.optional and n not in step.input_map):
            result.add(f"{where}.input_map", f"required input {req!r} of {step.model_name} is not fed", "map it")
        for key, value in step.output_map.items():
            if key not in outputs:
                result.add(
                    f"{where}.output_map[{key}]",
                    f"{step.model_name} has no output {key!r} (it has {', '.join(sorted(outputs))})",
                    "map an existing output",
                )
            available.add(value)
            produced.add(value)
        if target.max_batch_size < ens.max_batch_size:
            result.add(
                f"{name}.max_batch_size",
                f"ensemble max_batch_size {ens.max_batch_size} exceeds {step.model_name}'s {target.max_batch_size}",
                f"set max_batch_size <= {target.max_batch_size} in the ensemble, or raise it in {step.model_name}",
            )
    for out in ens_outputs:
        if out not in produced:
            result.add(f"{name}.output[{out}]", f"no step produces ensemble output {out!r}", "add an output_map")


def check_decoupled(spec: ModelSpec, configs: dict[str, ModelConfig], result: RepoCheck) -> None:
    """Streaming needs decoupled mode wherever tokens are streamed."""
    for sub in ("tensorrt_llm", "tensorrt_llm_bls"):
        config = configs.get(sub)
        if config is None:
            continue
        decoupled = config.model_transaction_policy.decoupled
        if spec.streaming and not decoupled:
            result.add(
                f"{sub}.model_transaction_policy.decoupled",
                "streaming is requested but the model is not decoupled",
                "set decoupled: true (streaming: true renders it)",
            )


def _engine_facts(config: dict[str, Any]) -> dict[str, Any]:
    """TP, PP, max batch, beam width and paged-context FMHA from a TRT-LLM engine config.json (old or new)."""
    if "pretrained_config" in config:  # TensorRT-LLM >= 0.8
        mapping = config["pretrained_config"].get("mapping", {})
        build = config.get("build_config", {})
        plugin = build.get("plugin_config", {})
        tp, pp = mapping.get("tp_size", 1), mapping.get("pp_size", 1)
    else:  # older builder_config layout
        build = config.get("builder_config", {})
        plugin = config.get("plugin_config", {})
        tp, pp = build.get("tensor_parallel", 1), build.get("pipeline_parallel", 1)
    return {
        "tp": tp,
        "pp": pp,
        "max_batch_size": build.get("max_batch_size"),
        "max_beam_width": build.get("max_beam_width", 1),
        "paged_context_fmha": bool(plugin.get("use_paged_context_fmha", False)),
    }


def resolve_pod_path(pod_path: str, path_map: dict[str, Path]) -> Path:
    """Where a path as seen in the pod is on this machine (longest matching prefix of ``path_map``)."""
    for prefix in sorted(path_map, key=len, reverse=True):
        if pod_path == prefix or pod_path.startswith(prefix.rstrip("/") + "/"):
            return path_map[prefix] / pod_path[len(prefix) :].lstrip("/")
    return Path(pod_path)


def check_engine(
    spec: ModelSpec, configs: dict[str, ModelConfig], path_map: dict[str, Path], result: RepoCheck
) -> None:
    """The engine directory holds a config.json that agrees with the declared TP/PP, batch and kv reuse."""
    llm = configs.get("tensorrt_llm")
    if llm is None or "gpt_model_path" not in llm.parameters:
        return
    pod_path = llm.parameters["gpt_model_path"].string_value
    local = resolve_pod_path(pod_path, path_map)
    where = "tensorrt_llm.parameters.gpt_model_path"
    try:
        facts = _engine_facts(json.loads((local / "config.json").read_text()))
    except FileNotFoundError:
        result.add(
            where,
            f"engine_dir {pod_path} (here {local}) holds no config.json",
            "point engine_dir at the built engine, pass --path-map POD_PREFIX=LOCAL_DIR, or --skip-engine",
        )
        return
    except ValueError as exc:
        result.add(where, f"{local}/config.json is not JSON: {exc}", "rebuild the engine")
        return
    result.checked.append("engine")
    if (facts["tp"], facts["pp"]) != (spec.tensor_parallelism, spec.pipeline_parallelism):
        result.add(
            "tensor_parallelism",
            f"declared TP={spec.tensor_parallelism} PP={spec.pipeline_parallelism} "
            f"but the engine was built with TP={facts['tp']} PP={facts['pp']}",
            "declare the engine's TP/PP or rebuild the engine",
        )
    if facts["max_batch_size"] is not None and facts["max_batch_size"] < spec.max_batch_size:
        result.add(
            "max_batch_size",
            f"max_batch_size {spec.max_batch_size} exceeds the engine's {facts['max_batch_size']}",
            f"set max_batch_size <= {facts['max_batch_size']} or rebuild the engine",
        )
    if facts["max_beam_width"] < spec.max_beam_width:
        result.add(
            "max_beam_width",
            f"max_beam_width {spec.max_beam_width} exceeds the engine's {facts['max_beam_width']}",
            "lower max_beam_width or rebuild the engine",
        )
    reuse = llm.parameters.get("enable_kv_cache_reuse")
    if reuse is not None and reuse.string_value == "true" and not facts["paged_context_fmha"]:
        result.add(
            "kv_cache.enable_reuse",
            "kv-cache reuse needs an engine built with paged context FMHA (use_paged_context_fmha is off)",
            "set kv_cache.enable_reuse: false, or rebuild with --use_paged_context_fmha enable",
        )


def check_llmapi(spec: ModelSpec, repo: Path, result: RepoCheck) -> None:
    """The LLM API arguments agree with the declared parallelism and batch size."""
    try:
        args = yaml.safe_load((repo / LLMAPI_ARGS).read_text())["llm_args"]
    except (FileNotFoundError, KeyError, TypeError, yaml.YAMLError) as exc:
        result.add(LLMAPI_ARGS, f"unreadable: {exc}", "re-run `rackctl triton render`")
        return
    for key, want in (
        ("tensor_parallel_size", spec.tensor_parallelism),
        ("pipeline_parallel_size", spec.pipeline_parallelism),
        ("max_batch_size", spec.max_batch_size),
    ):
        if args.get(key) != want:
            result.add(f"{LLMAPI_ARGS}.llm_args.{key}", f"is {args.get(key)!r}, declared {want}", f"{want}")


def check_launch(spec: ModelSpec, model_dir: Path, result: RepoCheck) -> None:
    """TP x PP equals the GPUs the Deployment requests and the launch's world size."""
    path = model_dir / MANIFEST_FILE
    if not path.exists():
        return
    result.checked.append("manifests")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "Deployment"]
    for doc in docs:
        for container in doc["spec"]["template"]["spec"]["containers"]:
            gpus = int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            if gpus != spec.world_size:
                result.add(
                    "deployment.resources.limits.nvidia.com/gpu",
                    f"requests {gpus} GPUs but TP x PP = {spec.world_size}",
                    "re-run `rackctl triton manifests`",
                )
            launch = " ".join(container.get("command", []) + container.get("args", []))
            marker = "--world_size="
            size = launch.split(marker, 1)[1].split()[0] if marker in launch else None
            if spec.layout == "inflight_batcher_llm" and size != str(spec.world_size):
                result.add(
                    "deployment.launch.world_size",
                    f"launch world size {size} but TP x PP = {spec.world_size}",
                    "re-run `rackctl triton manifests`",
                )


def check_model_dir(
    model_dir: Path, *, path_map: dict[str, Path] | None = None, skip_engine: bool = False
) -> RepoCheck:
    """All checks of one rendered model directory."""
    spec = load_written_spec(model_dir)
    result = RepoCheck(spec.name)
    repo = model_dir / REPOSITORY_DIR
    configs = parse_configs(repo, result)
    result.checked.append("protobuf")
    expected: tuple[str, ...] = ("ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls")
    if spec.layout == "llmapi":
        expected = ("tensorrt_llm",)
    for sub in expected:
        if sub not in configs and not (repo / sub / "config.pbtxt").exists():
            result.add(sub, "model missing from the repository", "re-run `rackctl triton render`")
    for name, config in configs.items():
        if config.platform == "ensemble":
            unparsed = frozenset(p.parent.name for p in repo.glob("*/config.pbtxt")) - set(configs)
            check_ensemble(name, configs, result, unparsed)
            result.checked.append("ensemble")
    check_decoupled(spec, configs, result)
    if spec.layout == "llmapi":
        check_llmapi(spec, repo, result)
    elif not skip_engine:
        check_engine(spec, configs, path_map or {}, result)
    check_launch(spec, model_dir, result)
    return result


def model_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is one rendered model, else every rendered model below it."""
    if (root / "rackctl-model.json").exists():
        return [root]
    return sorted(p.parent for p in root.glob("*/rackctl-model.json"))
