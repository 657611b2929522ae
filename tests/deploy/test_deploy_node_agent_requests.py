"""The node agents request at least the memory they hold before doing anything: the `gputide` process that has parsed
its arguments and imported what its command runs (measured here, by starting the real command to the point where it
needs the node: the API server's credentials, NVML). The exporter asked for 64Mi and the power-cap agent for 32Mi
while each holds 80-100 MiB from its first second: on every GPU node kube-scheduler counted 100 MiB and more as free
that the two use, and the workloads placed in it pay when the node runs short (the agents are system-node-critical,
which the kubelet does not evict, and their OOM score adjustment is the lowest there is)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_deploy_manifests import ROOT, one

from balancer.actuate.k8s_requests import quantity

OVERLAY = "overlays/power-cap"
STARTS = {   # container: arguments that run the command as far as it goes without a node (it exits there)
    "exporter": ["exporter", "--backend=nvml", "--port=0", "--duration=0.5"],
    "power-cap-agent": ["power-cap-agent", "--node=gpu-1", "--kubeconfig=/nonexistent/kubeconfig", "--once",
                        "--port=0"],
}


# the child's own peak (VmHWM: of its address space since exec; ru_maxrss would count the forked test process too)
PEAK_AT_EXIT = ("import atexit, sys; atexit.register(lambda: print(next(line.split()[1] for line in "
                "open('/proc/self/status') if line.startswith('VmHWM:')), file=sys.stderr)); "
                "from balancer.cli import main; sys.exit(main(sys.argv[1:]))")


def peak_rss_bytes(args: list[str]) -> int:
    """The peak resident memory of `gputide ARGS`, as the kernel counts it for that process."""
    done = subprocess.run([sys.executable, "-c", PEAK_AT_EXIT, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KUBERNETES_SERVICE_HOST": ""})
    return int(done.stderr.split()[-1]) * 1024   # kB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM: Linux /proc")
@pytest.mark.parametrize("container", sorted(STARTS))
def test_a_node_agent_requests_at_least_the_memory_it_holds_at_start(container):
    pod = one(OVERLAY, "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"]
    resources = next(c for c in pod["containers"] if c["name"] == container)["resources"]
    request, limit = quantity(resources["requests"]["memory"]), quantity(resources["limits"]["memory"])
    held = peak_rss_bytes(STARTS[container])
    assert held <= request, f"{container} holds {held / 2**20:.0f} MiB at start, requests {request / 2**20:.0f} MiB"
    assert 2 * request <= limit   # room above the start for the readings, the pods listed, the API client
