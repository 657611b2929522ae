"""Components and overlays/sharded (audit s33a12): components/controller-shards copies the base controller into each
shard and drops it, so a component listed after it, or added on top of the overlay, patches a gputide-controller
that is gone, and the build still passes. components/capacity there turned capacity.enabled on in the shared policy
while no shard got --services: both shards exit 2 at start (`check_capacity_enabled`), with the unsharded controller
already deleted. A static check of any build: every `gputide run` Deployment's policy, as mounted, agrees with its
--services."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from test_deploy_manifests import OVERLAYS, ROOT, render, render_over
from test_deploy_shards import OVERLAY, SHARDS, _args, _controllers, kustomize
from test_deploy_shards_install import comment

from balancer import config
from balancer.cli import build_parser
from balancer.cmd._run_parts import check_capacity_enabled
from balancer.errors import InputError

SHARDS_COMPONENT = "../../components/controller-shards"


def mounted(pod: dict, path: str, rendered) -> str:
    """The text a pod reads at `path`: the ConfigMap item behind the volume mounted over it."""
    for mount in pod["containers"][0].get("volumeMounts", []):
        where = mount["mountPath"].rstrip("/")
        if mount.get("subPath") and where == path or not mount.get("subPath") and os.path.dirname(path) == where:
            item = mount.get("subPath") or os.path.basename(path)
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            (cm,) = [o for o in rendered if o["kind"] == "ConfigMap" and o["metadata"]["name"] ==
                     volume["configMap"]["name"]]
            return cm["data"][item]
    raise AssertionError(f"nothing mounted at {path}")


def capacity_disagreements(rendered, tmp_path: Path) -> dict[str, str]:
    """Deployment name: why `gputide run` refuses to start it (capacity.enabled in its mounted policy against its
    --services), for every Deployment running `gputide run` in `rendered`."""
    out = {}
    for d in rendered:
        pod = d["spec"]["template"]["spec"] if d["kind"] == "Deployment" else None
        if pod is None or pod["containers"][0].get("args", [None])[0] != "run":
            continue
        args = build_parser().parse_args(pod["containers"][0]["args"])
        policy = tmp_path / f"{d['metadata']['name']}.yaml"
        policy.write_text(mounted(pod, args.policy, rendered))
        try:
            check_capacity_enabled(args, config.load(policy))
        except InputError as err:
            out[d["metadata"]["name"]] = str(err)
    return out


def sharded_with(tmp_path: Path, components: list[str]) -> list[dict]:
    """overlays/sharded copied with `components` (its controller-shards, `SHARDS_COMPONENT`, among them) in that
    order, rendered."""
    src, dst = ROOT / "deploy" / OVERLAY, tmp_path / "sharded"
    dst.mkdir()
    kustomization = yaml.safe_load((src / "kustomization.yaml").read_text())
    assert kustomization["components"] == [SHARDS_COMPONENT]
    kustomization["resources"][0] = os.path.relpath((src / kustomization["resources"][0]).resolve(), dst)
    kustomization["components"] = [os.path.relpath((src / c).resolve(), dst) for c in components]
    (dst / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    for extra in kustomization["resources"][1:]:   # a file must lie under its kustomization
        shutil.copy(src / extra, dst / extra)
    return kustomize(dst)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlays_controllers_start_with_their_policy_and_services(overlay, tmp_path):
    assert capacity_disagreements(render(overlay), tmp_path) == {}


def test_capacity_before_controller_shards_reaches_both_shards(tmp_path):
    rendered = sharded_with(tmp_path, ["../../components/capacity", SHARDS_COMPONENT])
    assert capacity_disagreements(rendered, tmp_path) == {}
    assert set(_controllers(rendered)) == set(SHARDS)
    assert all(_args(d).services for d in _controllers(rendered).values())


def test_capacity_after_controller_shards_or_on_top_is_caught(tmp_path):
    """Both build (the audit's crash loop): the check names each shard and capacity.enabled."""
    (tmp_path / "after").mkdir()
    (tmp_path / "on-top").mkdir()
    for rendered in (sharded_with(tmp_path / "after", [SHARDS_COMPONENT, "../../components/capacity"]),
                     render_over(tmp_path / "on-top", OVERLAY, components=("capacity",))):
        assert set(_controllers(rendered)) == set(SHARDS)
        why = capacity_disagreements(rendered, tmp_path)
        assert set(why) == set(SHARDS), why
        assert all("capacity.enabled" in w and "--services" in w for w in why.values())


def test_the_comment_puts_components_before_controller_shards():
    text = " ".join(comment().split())
    assert "goes under the sharding or in `components:` before controller-shards" in text
    assert "test_deploy_shards_components.py" in text
    kustomization = yaml.safe_load((ROOT / "deploy" / OVERLAY / "kustomization.yaml").read_text())
    assert kustomization["components"][-1] == SHARDS_COMPONENT
