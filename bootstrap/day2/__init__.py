"""Day-2 work on a running fleet: status, apply (reconcile), redeploy, driver upgrades, the Kubernetes seam."""
