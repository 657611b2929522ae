"""An operator's overlay that sets its own `namespace:` over one of ours moves every ServiceAccount a binding names.

kustomize moves a RoleBinding's or ClusterRoleBinding's ServiceAccount subject with the ServiceAccount only where
both were written with the same namespace (kustomize's namespace transformer alone rewrites subjects named
`default`). The base's ServiceAccounts had none (the base's `namespace:` gave them gputide) while the subjects named
gputide: installed into `gpu-system`, the controller's and the power-cap agent's bindings still named
gputide/..., and every call they made was refused (audit s32x1).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.deploy.test_deploy_manifests import OVERLAYS, ROOT


def _render_in(tmp_path, overlay: str, namespace: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) not on PATH")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
        "resources": [os.path.relpath(ROOT / "deploy" / overlay, mine)]}))
    out = subprocess.run([kubectl, "kustomize", str(mine)], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_binding_names_a_service_account_the_overlay_installs(tmp_path, overlay):
    objs = _render_in(tmp_path, overlay, "gpu-system")
    accounts = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"}
    assert accounts and {ns for ns, _ in accounts} == {"gpu-system"}, accounts
    subjects = [(o["kind"], o["metadata"]["name"], (s.get("namespace"), s["name"])) for o in objs
                if o["kind"] in ("RoleBinding", "ClusterRoleBinding") for s in o.get("subjects") or ()
                if s.get("kind") == "ServiceAccount"]
    assert subjects, overlay
    assert [s for s in subjects if s[2] not in accounts] == [], overlay
