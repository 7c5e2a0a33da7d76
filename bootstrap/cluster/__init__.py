"""What the kubernetes and nvidia stages apply, rendered and checked before any node is touched: kubeadm
configurations, kube-vip, chart values, the GPU Operator's plan, Helm rendering and the offline validation of
it all. One module here talks to a live cluster, :mod:`bootstrap.cluster.helm_install` (Helm's own SDK);
everything else that does is in :mod:`bootstrap.kube` (the client, apply, watches) and
:mod:`bootstrap.validation` (the live checks)."""
