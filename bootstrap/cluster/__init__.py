"""What the kubernetes and nvidia stages apply, rendered and checked before any node is touched: kubeadm
configurations, kube-vip, chart values, the GPU Operator's plan, Helm rendering and the offline validation of
it all. Nothing here talks to a live cluster: that is :mod:`bootstrap.kube` (the client, apply, watches),
:mod:`bootstrap.validation` (the live checks) and :mod:`bootstrap.stages.helm_install` (Helm's own SDK)."""
