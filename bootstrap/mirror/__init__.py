"""The head node's site services: a signed apt mirror of what the roles install, and a container registry.

``manifest`` (what the roles ask for), ``upstreams`` + ``upstream_keys`` (the repositories beside
Debian's: Kubernetes', NVIDIA's, and their signing keys), ``apt_fetch`` (a private apt state that resolves and downloads
the closure), ``sitekey`` (the site's signing key), ``repo`` (the reprepro repository, swapped in whole),
``check`` (every requested package at its pinned version), ``oci`` + ``images`` (the registry's images),
``site_vars`` (the group vars every role reads). Paths under ``<state-dir>/mirror/`` are in ``layout``.
"""
