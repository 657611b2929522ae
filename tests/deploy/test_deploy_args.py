"""Every gputide container in every overlay starts: its arguments parse with the real CLI (an unknown flag exits 2
and the pod crash-loops), and every file an argument names is mounted where it says."""

from __future__ import annotations

import pytest
from test_deploy_manifests import OVERLAYS, render

from balancer.cli import build_parser

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


def gputide_containers(overlay: str) -> list[tuple[str, dict]]:
    out = []
    for obj in render(overlay):
        if obj["kind"] in WORKLOADS:
            pod = obj["spec"]["template"]["spec"]
            out += [(f'{obj["kind"]}/{obj["metadata"]["name"]}/{c["name"]}', c) for c in pod["containers"]
                    if "gputide" in c.get("image", "").split("/")[-1]]
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_gputide_container_parses_with_the_real_cli(overlay):
    found = gputide_containers(overlay)
    assert found or overlay == "overlays/with-dcgm-exporter"
    for where, container in found:
        try:
            args = build_parser().parse_args(container["args"])
        except SystemExit as exc:
            pytest.fail(f"{overlay}: {where} {container['args']} does not parse (exit {exc.code})")
        mounts = [m["mountPath"].rstrip("/") + "/" for m in container.get("volumeMounts", ())]
        for name in ("policy", "services", "pod_resources_socket", "power_caps_file", "fleet"):
            path = getattr(args, name, None)
            if isinstance(path, str) and path.startswith("/"):
                assert any(path.startswith(m) for m in mounts), f"{overlay}: {where} reads {path}, not mounted"


def test_the_exporter_names_series_by_the_node_it_runs_on():
    (exporter,) = [c for where, c in gputide_containers("base") if where.startswith("DaemonSet/gputide-exporter/")]
    args = build_parser().parse_args(exporter["args"])
    assert args.hostname == "$(NODE_NAME)"
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in exporter["env"]


@pytest.mark.parametrize("overlay", ["overlays/dev", "overlays/dev-scheduler"])
def test_the_kind_overlays_run_the_locally_built_image_and_a_dry_run_controller(overlay):
    """On kind nothing pulls ghcr.io/gputide/gputide (it is not published): every container runs gputide:dev."""
    found = dict(gputide_containers(overlay))
    assert {c["image"] for c in found.values()} == {"gputide:dev"}
    (controller,) = [c for where, c in found.items() if where.startswith("Deployment/gputide-controller/")]
    assert build_parser().parse_args(controller["args"]).dry_run
    assert any(w.startswith("Deployment/gputide-scheduler/") for w in found) == overlay.endswith("scheduler")
