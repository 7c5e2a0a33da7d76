"""Every Go program the lab builds, pinned by exact module version: the one place these versions live.

A Kubernetes release is buildable when it is a key of :data:`RELEASES`. Its companions (etcd, CoreDNS, the
pause tag) are kubeadm's own pins for that release, read from the real kubeadm built at that version
(``kubeadm config images list --kubernetes-version vX.Y.Z``), so the images the lab assembles are the ones
kubeadm asks for. crictl follows the Kubernetes minor (cri-tools releases one per minor).

``k8s.io/kubernetes`` is not ``go install``-able: its go.mod replaces every ``k8s.io/*`` staging module with
a local path. A build module requires it and replaces each staging module with its published ``v0.X.Y``
(kubernetes/kubernetes#79384), the way other projects consume it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The oldest Go toolchain these pins build with (k8s.io/kubernetes v1.37's go.mod says ``go 1.26.0``).
GO_MINIMUM = (1, 26)

KUBERNETES_MODULE = "k8s.io/kubernetes"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
FLANNEL_MODULE = "github.com/flannel-io/flannel"
CNI_PLUGINS_MODULE = "github.com/containernetworking/plugins"
LOCAL_PATH_MODULE = "github.com/rancher/local-path-provisioner"
#: The CNI plugins a node carries (pkgs.k8s.io's kubernetes-cni has them all; flannel's chain uses these).
CNI_PLUGINS = {"bridge": "main", "host-local": "ipam", "loopback": "main", "portmap": "meta"}


@dataclass(frozen=True)
class KubernetesRelease:
    """A Kubernetes release the lab can build, with kubeadm's companions for it."""

    version: str  #: e.g. ``1.37.2``
    etcd: str  #: kubeadm's etcd, module version (image tag ``3.7.0-0`` -> ``v3.7.0``)
    coredns: str  #: kubeadm's CoreDNS, module version
    pause: str  #: kubeadm's pause tag (upstream's pause is C; the lab's is its own Go program: ``pause/``)
    cri_tools: str  #: crictl of the same minor
    helm: str = "v3.22.0"  #: Helm, for every release (one Helm serves every supported minor)
    flannel: str = "v0.28.10"  #: the CNI the lab proves (flanneld; Go, iptables userland from Debian)
    cni_plugins: str = "v1.10.0"  #: bridge, host-local, loopback, portmap: the kubernetes-cni package
    containerd: str = "v2.4.2"  #: the CRI of the native nodes (Debian's 1.6 is out of support)
    #: the storage class the lab proves (the newest the module proxy serves; the product's default chart is
    #: 0.0.32, so the lab's inventory names this one in ``kubernetes.charts.local_path_provisioner``)
    local_path_provisioner: str = "v0.0.30"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def staging_version(self) -> str:
        """``1.37.2`` -> ``v0.37.2``: the version of every ``k8s.io/*`` staging module of the release."""
        major, minor, patch = self.version.split(".")
        return f"v0.{minor}.{patch}" if major == "1" else f"v{major}.{minor}.{patch}"


#: Buildable releases, newest first. Add one by building its kubeadm and reading its image list.
RELEASES: dict[str, KubernetesRelease] = {
    "1.37.2": KubernetesRelease("1.37.2", etcd="v3.7.0", coredns="v1.14.6", pause="3.10.2", cri_tools="v1.37.0"),
}


@dataclass(frozen=True)
class GoProgram:
    """One binary: ``go build -o NAME PACKAGE`` in a module that requires ``MODULE@VERSION``."""

    name: str
    module: str
    version: str
    package: str
    group: str  #: ``control-plane``, ``node`` or ``addons``: what ``--only`` selects
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    #: ``k8s.io/*`` staging modules replaced by their published versions (``k8s.io/kubernetes`` only)
    staging: str = ""
    #: modules pinned beside the main one (``replace`` lines), where upstream's go.mod relies on its own replaces
    replaces: tuple[tuple[str, str], ...] = field(default=())
    #: modules the proxy does not serve, replaced by a build shim of the lab's own (module, directory under
    #: ``components/shims``): only where upstream links code the lab never runs (a cloud backend)
    shims: tuple[tuple[str, str], ...] = field(default=())
    #: built with cgo (the C toolchain of this machine; the program then needs the glibc of Debian 12)
    cgo: bool = False
    #: a directory of this package holding the program's own Go source (the lab's pause), instead of a module;
    #: where ``module`` is not the lab's own (``rackctl.lab/...``), that source requires ``module@version``
    source: str = ""
    #: further packages of the module read with ``package`` (a CRD source's other API groups)
    also: tuple[str, ...] = ()

    @property
    def ident(self) -> str:
        return f"{self.name} {self.version}"


PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
KEDA_MODULE = "github.com/kedacore/keda/v2"
#: KEDA at the release the product's ``kubernetes.charts.keda`` pin installs (chart 2.21.0)
KEDA_VERSION = "v2.21.0"
#: The Prometheus operator at the release kube-prometheus-stack 88.5.3 (the product's chart pin) ships: its
#: Chart.yaml's ``appVersion: v0.93.1``, read at the chart's tag in prometheus-community/helm-charts
PROMETHEUS_OPERATOR_VERSION = "v0.93.1"
#: Prometheus 3.13.1, the operator v0.93.1's ``DefaultPrometheusVersion`` (the newest of its compatibility
#: matrix, pkg/operator/defaults.go). Prometheus' Go module numbers v3.X.Y as v0.3XX.Y.
PROMETHEUS_VERSION = "v0.313.1"


def prometheus_release(module_version: str = PROMETHEUS_VERSION) -> str:
    """``v0.313.1`` -> ``v3.13.1``: the Prometheus release (its image tag) a module version is."""
    _, minor, patch = module_version.removeprefix("v").split(".")
    return f"v{int(minor) // 100}.{int(minor) % 100}.{patch}"


def _prometheus_common_stamp(version: str) -> tuple[str, ...]:
    """The version stamp Prometheus' projects set with promu (``prometheus --version``, its build_info metric)."""
    pkg = "github.com/prometheus/common/version"
    return (f"-X {pkg}.Version={version.removeprefix('v')}", f"-X {pkg}.Branch=HEAD", f"-X {pkg}.Revision=unknown")


#: What ``up --stages kubernetes`` installs when a model autoscales (``deployment.autoscaling``): the lab's
#: stand-in charts of kube-prometheus-stack and keda (rackctl_lab/charts) run these real programs.
AUTOSCALING_PROGRAMS = (
    # Only the Kubernetes service discovery (the operator's configs use nothing else); upstream's own
    # build tags (plugins/plugin_*.go). The web UI's assets are not in the module (npm-built): the API is.
    GoProgram(
        "prometheus",
        PROMETHEUS_MODULE,
        PROMETHEUS_VERSION,
        f"{PROMETHEUS_MODULE}/cmd/prometheus",
        "autoscaling",
        ldflags=_prometheus_common_stamp(prometheus_release()),
        tags=("remove_all_sd", "enable_kubernetes_sd"),
        replaces=(("cloud.google.com/go", "v0.123.0"),),  # upstream's own replace
    ),
    *(
        GoProgram(
            name,
            PROMETHEUS_OPERATOR_MODULE,
            PROMETHEUS_OPERATOR_VERSION,
            f"{PROMETHEUS_OPERATOR_MODULE}/cmd/{command}",
            "autoscaling",
            ldflags=_prometheus_common_stamp(PROMETHEUS_OPERATOR_VERSION),
            # upstream's go.mod replaces its API and client modules with their directories
            replaces=tuple(
                (f"{PROMETHEUS_OPERATOR_MODULE}/pkg/{sub}", PROMETHEUS_OPERATOR_VERSION)
                for sub in ("apis/monitoring", "client")
            ),
        )
        for name, command in (
            ("prometheus-operator", "operator"),
            ("prometheus-config-reloader", "prometheus-config-reloader"),
        )
    ),
    *(
        GoProgram(
            name,
            KEDA_MODULE,
            KEDA_VERSION,
            f"{KEDA_MODULE}/cmd/{command}",
            "autoscaling",
            ldflags=(f"-X {KEDA_MODULE}/version.Version={KEDA_VERSION.removeprefix('v')}",),
            # upstream's go.mod pins this one by a replace (a pseudo-version of a fixed commit)
            replaces=(("github.com/nexus-rpc/nexus-proto-annotations", "v0.1.1-0.20260629224316-835bd8d49cb4"),),
        )
        for name, command in (("keda", "operator"), ("keda-adapter", "adapter"))
    ),
)


def _kube_ldflags(version: str) -> tuple[str, ...]:
    """The version stamp kubeadm, kubelet and the API server report (and kubeadm checks against its target)."""
    major, minor, _ = version.split(".")
    pkg = "k8s.io/component-base/version"
    return (
        f"-X {pkg}.gitVersion=v{version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
        f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
    )


KUBERNETES_COMMANDS = {
    "kube-apiserver": "control-plane",
    "kube-controller-manager": "control-plane",
    "kube-scheduler": "control-plane",
    "kubeadm": "node",
    "kubelet": "node",
    "kubectl": "node",
    "kube-proxy": "node",
}


def programs(release: KubernetesRelease) -> list[GoProgram]:
    """Every program the lab builds for ``release``, in build order (the shared Kubernetes packages first)."""
    kube = [
        GoProgram(
            name,
            KUBERNETES_MODULE,
            f"v{release.version}",
            f"{KUBERNETES_MODULE}/cmd/{name}",
            group,
            ldflags=_kube_ldflags(release.version),
            staging=release.staging_version,
        )
        for name, group in KUBERNETES_COMMANDS.items()
    ]
    return [
        *kube,
        GoProgram("etcd", "go.etcd.io/etcd/server/v3", release.etcd, "go.etcd.io/etcd/server/v3", "control-plane"),
        GoProgram("etcdctl", "go.etcd.io/etcd/etcdctl/v3", release.etcd, "go.etcd.io/etcd/etcdctl/v3", "control-plane"),
        GoProgram(
            "crictl",
            "sigs.k8s.io/cri-tools",
            release.cri_tools,
            "sigs.k8s.io/cri-tools/cmd/crictl",
            "node",
            # the stamp cri-tools' Makefile sets (``crictl --version`` says "unknown" without it)
            ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version={release.cri_tools.removeprefix('v')}",),
        ),
        *(
            GoProgram(
                name,
                CONTAINERD_MODULE,
                release.containerd,
                f"{CONTAINERD_MODULE}/cmd/{name}",
                "node",
                ldflags=(f"-X {CONTAINERD_MODULE}/version.Version={release.containerd}",),
                tags=("no_btrfs", "no_devmapper", "no_zfs"),
            )
            for name in ("containerd", "containerd-shim-runc-v2", "ctr")
        ),
        GoProgram("pause", "rackctl.lab/pause", release.pause, ".", "node", source="pause"),
        GoProgram("coredns", "github.com/coredns/coredns", release.coredns, "github.com/coredns/coredns", "addons"),
        GoProgram("helm", "helm.sh/helm/v3", release.helm, "helm.sh/helm/v3/cmd/helm", "addons"),
        GoProgram(
            "flanneld",
            FLANNEL_MODULE,
            release.flannel,
            FLANNEL_MODULE,
            "addons",
            ldflags=(f"-X {FLANNEL_MODULE}/pkg/version.Version={release.flannel}",),
            # flanneld's main imports its tencent-vpc backend, whose SDK package the proxy does not serve
            cgo=True,  # its udp backend's C proxy; upstream builds it with cgo too
            shims=(("github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc", "tencentcloud_vpc"),),
        ),
        # flannel's CNI plugin (flannel-io/cni-plugin) is not served by the module proxy: the lab's own
        GoProgram("flannel", "rackctl.lab/flannel-cni", release.flannel, ".", "addons", source="flannel_cni"),
        GoProgram(
            "local-path-provisioner",
            LOCAL_PATH_MODULE,
            release.local_path_provisioner,
            LOCAL_PATH_MODULE,
            "addons",
            ldflags=(f"-X main.VERSION={release.local_path_provisioner}",),  # upstream's build script's stamp
        ),
        *(
            GoProgram(
                name,
                CNI_PLUGINS_MODULE,
                release.cni_plugins,
                f"{CNI_PLUGINS_MODULE}/plugins/{kind}/{name}",
                "node",
                ldflags=(f"-X {CNI_PLUGINS_MODULE}/pkg/utils/buildversion.BuildVersion={release.cni_plugins}",),
            )
            for name, kind in CNI_PLUGINS.items()
        ),
        *AUTOSCALING_PROGRAMS,
    ]


GROUPS = ("control-plane", "node", "addons", "autoscaling")

CONTROLLER_TOOLS_MODULE = "sigs.k8s.io/controller-tools"
MONITORING_MODULE = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"


@dataclass(frozen=True)
class CrdSource:
    """CRDs generated from a project's own Go API types by ``controller-gen`` (never taken from an archive):
    ``api`` is the module at its pinned version with the API package (a build module requires it, as for a
    program), ``generator`` the controller-gen that reads it."""

    name: str
    api: GoProgram
    generator: GoProgram

    @property
    def ident(self) -> str:
        return f"{self.name} CRDs {self.api.version} (controller-gen {self.generator.version})"


#: Grafana's dashboard schema as Go types (Apache-2.0; generated from Grafana's own schemas by its cog tool).
#: Grafana itself is AGPL, which the project's build rules exclude: no Grafana runs in the lab.
GRAFANA_SDK_MODULE = "github.com/grafana/grafana-foundation-sdk/go"
#: The lab's own checker of dashboard JSON against those types (``components/dashboard_check``), built in a
#: module that requires the SDK at its newest release the module proxy serves (v0.0.22, 2026-12-07).
DASHBOARD_CHECK = GoProgram(
    "dashboard-check", GRAFANA_SDK_MODULE, "v0.0.22", ".", "dashboards", source="dashboard_check"
)

#: kubebuilder's CRD generator, at the newest release the module proxy serves (2026-11-29).
CONTROLLER_GEN = GoProgram(
    "controller-gen",
    CONTROLLER_TOOLS_MODULE,
    "v0.23.0",
    f"{CONTROLLER_TOOLS_MODULE}/cmd/controller-gen",
    "crds",
)
#: KEDA's API types (``keda.sh/v1alpha1``: ScaledObject, ScaledJob, TriggerAuthentication, ...) at the KEDA
#: release the product's ``kubernetes.charts.keda`` pin installs.
KEDA_CRDS = CrdSource(
    "keda",
    GoProgram(
        "keda-api",
        KEDA_MODULE,
        KEDA_VERSION,
        f"{KEDA_MODULE}/apis/keda/v1alpha1",
        "crds",
        # CloudEventSource and ClusterCloudEventSource (eventing.keda.sh), which KEDA's operator watches too
        also=(f"{KEDA_MODULE}/apis/eventing/v1alpha1",),
    ),
    CONTROLLER_GEN,
)
#: The Prometheus operator's API types (``monitoring.coreos.com/v1``: ServiceMonitor, PodMonitor, Prometheus,
#: ...) at the operator release kube-prometheus-stack 88.5.3 (the product's ``kubernetes.charts`` pin) ships:
#: its Chart.yaml's ``appVersion: v0.93.1``, read at the chart's tag in prometheus-community/helm-charts.
MONITORING_CRDS = CrdSource(
    "prometheus-operator",
    GoProgram(
        "monitoring-api",
        MONITORING_MODULE,
        PROMETHEUS_OPERATOR_VERSION,
        f"{MONITORING_MODULE}/v1",
        "crds",
        # ScrapeConfig, PrometheusAgent, AlertmanagerConfig (the operator runs without them, saying so)
        also=(f"{MONITORING_MODULE}/v1alpha1",),
    ),
    CONTROLLER_GEN,
)
CRD_SOURCES = {source.name: source for source in (KEDA_CRDS, MONITORING_CRDS)}
