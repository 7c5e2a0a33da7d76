"""NVIDIA GPU logic: NVSwitch detection, driver/Fabric Manager versions, cluster validators."""
