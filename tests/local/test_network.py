"""The local cluster's DNS: the hosts file's records, as the cluster DNS answers for pods and
Services (pure: no namespace needed)."""

from __future__ import annotations

import threading

from aichor_iac.local.network import Network, records


def job(name: str, role: str, hostname: str | None = None) -> dict:
    """An Indexed Job, or (`hostname`) a replica's Job of its own, whose pod has that host."""
    pod = {"subdomain": "exp", **({"hostname": hostname} if hostname else {})}
    template = {"metadata": {"labels": {"role": role}}, "spec": pod}
    mode = "NonIndexed" if hostname else "Indexed"
    return {
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"template": template, "completionMode": mode},
    }


def service(name: str, role: str, cluster_ip: str = "None") -> dict:
    spec = {"selector": {"role": role}, "clusterIP": cluster_ip}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def test_scheduled_pods_and_the_services_selecting_them_resolve():
    workers = job("exp-worker", "worker")
    workloads = [(workers, 0), (workers, 1), (workers, 2)]
    ips = {"exp-worker-0": "10.0.0.2", "exp-worker-1": "10.0.0.3", "exp-worker-2": "10.0.0.4"}
    live = {"exp-worker-0", "exp-worker-2"}  # exp-worker-1 ended (or not scheduled yet)
    services = [service("exp", "worker"), service("one", "worker", cluster_ip="")]
    assert records(workloads, services, live, ips) == [
        "127.0.0.1 localhost",
        "10.0.0.2 exp-worker-0.exp.ns.svc.cluster.local exp-worker-0.exp exp-worker-0",
        "10.0.0.4 exp-worker-2.exp.ns.svc.cluster.local exp-worker-2.exp exp-worker-2",
        "10.0.0.2 exp.ns.svc.cluster.local",  # headless: every ready address
        "10.0.0.4 exp.ns.svc.cluster.local",
        "10.0.0.2 one.ns.svc.cluster.local",  # a ClusterIP: one address
    ]


def test_a_service_selects_by_the_completion_index_the_job_controller_labels():
    workers = job("exp-worker", "worker")
    indexed = service("first", "worker")
    indexed["spec"]["selector"]["batch.kubernetes.io/job-completion-index"] = "1"
    ips = {"exp-worker-0": "10.0.0.2", "exp-worker-1": "10.0.0.3"}
    lines = records([(workers, 0), (workers, 1)], [indexed], set(ips), ips)
    assert lines[-1] == "10.0.0.3 first.ns.svc.cluster.local"


def test_a_replicas_own_job_has_its_host_name_and_no_index():
    """A Job per replica (non-Indexed): its pod is known by the template's host name, and the
    Job controller gives it no completion index to select on."""
    alone = job("exp-worker-1", "worker", hostname="exp-worker-1")
    indexed = service("first", "worker")
    indexed["spec"]["selector"]["batch.kubernetes.io/job-completion-index"] = "0"
    ips = {"exp-worker-1": "10.0.0.3"}
    assert records([(alone, 0)], [indexed, service("exp", "worker")], set(ips), ips) == [
        "127.0.0.1 localhost",
        "10.0.0.3 exp-worker-1.exp.ns.svc.cluster.local exp-worker-1.exp exp-worker-1",
        "10.0.0.3 exp.ns.svc.cluster.local",
    ]


def test_a_pod_resolving_while_the_hosts_file_changes_reads_the_records_that_stay(tmp_path):
    """Pods start and end while others resolve names: a pod that stays is in every read of
    the hosts file, whole (it is rewritten in place, never shrunk: a shorter set is padded
    with blank lines). Truncating, then writing, let a worker read an empty file and fail to
    find its master."""
    many = ["127.0.0.1 localhost"]
    many += [f"10.77.0.{n} exp-worker-{n}.exp exp-worker-{n}" for n in range(40)]
    stay = many[:3]  # (localhost and two pods that live throughout)
    network = Network(tmp_path, [], private=False)
    (tmp_path / "hosts").write_text("\n".join(many) + "\n")
    missed: list[list[str]] = []
    done = threading.Event()

    def resolve() -> None:
        while not done.is_set():
            lines = (tmp_path / "hosts").read_text().splitlines()
            if lines[: len(stay)] != stay:
                missed.append(lines)

    reader = threading.Thread(target=resolve)
    reader.start()
    try:
        for _ in range(2000):
            network.hosts(stay)
            network.hosts(many)
        network.hosts(stay)
    finally:
        done.set()
        reader.join()
    assert missed == [], missed[:3]
    assert (tmp_path / "hosts").read_text().split("\n\n")[0] == "\n".join(stay)
