"""Checks of a live cluster: what ``rackctl validate-cluster --kubeconfig`` and the nvidia stage run.

- :mod:`bootstrap.validation.live`: the two ways to run them (once, for the command; polled until they pass,
  for the stage) and the reads they need (``kubectl get nodes``).
- :mod:`bootstrap.validation.dcgm`: each GPU node's DCGM exporter read through the API server's pod proxy.
- :mod:`bootstrap.validation.workloads`: the CUDA smoke and NCCL all-reduce Jobs, applied, watched, judged.

The read-only checks on what was read (node Ready, allocatable GPUs, Fabric Manager, DCGM metrics) are
:func:`bootstrap.nvidia.validators.validate_cluster`; offline checks of what will be applied are
:mod:`bootstrap.cluster.validate`. Nothing here imports the CLI or the stages.
"""
