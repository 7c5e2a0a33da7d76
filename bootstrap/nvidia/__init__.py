"""NVIDIA GPU logic: NVSwitch detection, nvidia-smi reports, the host side, driver/Fabric Manager versions, NCCL
tests' output; the cluster checks that read them are :mod:`bootstrap.validation.checks`."""
