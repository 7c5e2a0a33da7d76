"""Checks of a live cluster: what ``rackctl validate-cluster --kubeconfig`` and the nvidia stage run.

- :mod:`bootstrap.validation.checks`: the read-only checks of what the cluster reports (node Ready, allocatable
  GPUs, Fabric Manager, DCGM metrics), registered by name; :func:`~bootstrap.validation.checks.validate_cluster`
  runs them all. Their results: :mod:`bootstrap.validation.report`.
- :mod:`bootstrap.validation.live`: the two ways to run them (once, for the command; polled until they pass,
  for the stage) and the reads they need (``kubectl get nodes``).
- :mod:`bootstrap.validation.dcgm`: each GPU node's DCGM exporter read through the API server's pod proxy.
- :mod:`bootstrap.validation.workloads`: the CUDA smoke and NCCL all-reduce Jobs, applied, watched, judged.

Offline checks of what will be applied are :mod:`bootstrap.cluster.validate`. Nothing here imports the CLI or
the stages.
"""
