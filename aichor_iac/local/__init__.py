"""Local runs: every replica of a rendered experiment as local processes, the way Kubernetes
would run its pods, and what Kubernetes does with a pod template on the way.

Needs Linux and root or user namespaces (network namespaces with `ip netns`, `unshare`, bind
mounts): each pod gets an address of its own on a bridge, its own host name, /tmp and volumes.
The commands run with this machine's programs and Python environment, not the image's: a
smoke test of the experiment's code paths (rendezvous, env, ordering, following) before it
costs GPUs.

`run` (a run of an experiment) → `cluster` (`LocalCluster`: pods' lives) → `jobs` (the Job
controller's, gang schedulers' and Kueue's rules), `network` (namespaces, hosts file),
`containers` (processes), `volumes`, `downward` (env and expansion); `host` (what this
machine must have), `progress` (the table a terminal shows).
"""

from .cluster import LocalCluster
from .downward import container_argv, container_env, container_of, expand
from .host import LocalUnavailable, missing
from .jobs import KUEUE_QUEUE, gang_of, job_of
from .run import LocalRunFailed, run_experiment, run_experiments

__all__ = [
    "KUEUE_QUEUE",
    "LocalCluster",
    "LocalRunFailed",
    "LocalUnavailable",
    "container_argv",
    "container_env",
    "container_of",
    "expand",
    "gang_of",
    "job_of",
    "missing",
    "run_experiment",
    "run_experiments",
]
