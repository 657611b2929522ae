"""The power-cap agent holds what setting a GPU's power limit needs and nothing more: root with CAP_SYS_ADMIN (the
NVIDIA driver's os_is_administrator() is capable(CAP_SYS_ADMIN); NVML answers "Insufficient Permissions" without it),
the GPUs' device nodes and libnvidia-ml from the NVIDIA runtime, as the exporter beside it gets them. It ran
privileged: every capability, every host device (/dev/mem, the node's disks) and no seccomp filter, in a container
that also holds an API token."""

from __future__ import annotations

from test_deploy_manifests import one

OVERLAY = "overlays/power-cap"


def _pod_and_agent() -> tuple[dict, dict]:
    pod = one(OVERLAY, "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "power-cap-agent")


def test_the_power_cap_agent_is_root_with_cap_sys_admin_only_not_privileged():
    pod, agent = _pod_and_agent()
    sc = agent["securityContext"]
    assert not sc.get("privileged")
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    # root: Kubernetes has no ambient capabilities, so a non-root process would hold SYS_ADMIN in its bounding set only
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc.get("seccompProfile", pod["securityContext"].get("seccompProfile")) == {"type": "RuntimeDefault"}
    # the API server refuses allowPrivilegeEscalation: false beside CAP_SYS_ADMIN: the pod would never be created
    assert sc.get("allowPrivilegeEscalation") is not False


def test_the_power_cap_agent_reaches_the_gpus_through_the_nvidia_runtime_not_host_devices():
    pod, agent = _pod_and_agent()
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounted = {m["name"] for m in agent["volumeMounts"]}
    assert not any(path.startswith("/dev") for name, path in host_paths.items() if name in mounted)
    # and it asks for no GPU: that would take one from the workloads it caps
    assert "nvidia.com/gpu" not in str(agent.get("resources", {}))
