"""rackctl: take a rack of Dell PowerEdge servers from bare metal to serving LLMs."""

__version__ = "0.1.0"
