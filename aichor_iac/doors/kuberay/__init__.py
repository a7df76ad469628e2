"""KubeRay's RayJob and RayCluster."""
