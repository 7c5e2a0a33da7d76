"""In-band access: how rackctl reaches an installed node over SSH (and Ansible through it)."""
