"""An operator's overlay that sets its own `namespace:` over one of ours moves every ServiceAccount a binding names.

kustomize moves a RoleBinding's or ClusterRoleBinding's ServiceAccount subject with the ServiceAccount only where
both were written with the same namespace (kustomize's namespace transformer alone rewrites subjects named
`default`). The base's ServiceAccounts had none (the base's `namespace:` gave them gputide) while the subjects named
gputide: installed into `gpu-system`, the controller's and the power-cap agent's bindings still named
gputide/..., and every call they made was refused (audit s32x1).
"""

from __future__ import annotations

import pytest

from tests.deploy.test_deploy_manifests import OVERLAYS, render_over


def _render_in(tmp_path, overlay: str, namespace: str) -> list[dict]:
    return render_over(tmp_path, overlay, namespace=namespace)


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
