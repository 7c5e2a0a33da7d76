"""Cluster sizing from the design guide's tables."""
