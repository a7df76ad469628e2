"""An experiment's objects read back from a cluster, and what `status` reports of them."""
