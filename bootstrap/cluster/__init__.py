"""Rendering and checking everything the kubernetes and nvidia stages apply, before any node is touched."""
