"""Where gputide's servers bind is settable in the manifests (audit s33h4). Nothing set `--listen-address`, which bound
0.0.0.0: an IPv6-only cluster's kubelet probes and Prometheus reached none of them. The default is now every address
(`::`, bound with IPV6_V6ONLY off so that it takes IPv4 too, exporters/server.py; 0.0.0.0 on a kernel without IPv6,
balancer/cmd/_args.py bind), and components/listen-address sets one address for all of them at once: each gputide
container that serves imports the optional ConfigMap gputide-listen-address into its environment, whose
GPUTIDE_LISTEN_ADDRESS is `--listen-address`'s default. (A component patching the containers' args could not: the
exporter DaemonSet's containers are [exporter] or [power-cap-agent, exporter] depending on the overlay, and a JSON
patch names a container by its index.)"""

from __future__ import annotations

import pytest
from test_deploy_args import WORKLOADS, gputide_containers
from test_deploy_manifests import OVERLAYS, render_over

from balancer.cli import build_parser
from balancer.cmd._args import LISTEN_ENV

CONFIGMAP = "gputide-listen-address"


def _listen(args) -> str | None:
    return getattr(args, "listen_address", getattr(args, "listen", None))


def _serves(container: dict) -> bool:
    args = build_parser().parse_args(container["args"])
    return hasattr(args, "listen_address") or hasattr(args, "listen")


def _imports(container: dict) -> list[str]:
    return [e["configMapRef"]["name"] for e in container.get("envFrom", ())
            if "configMapRef" in e and e["configMapRef"].get("optional") is True]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_gputide_server_imports_the_listen_address_optionally(overlay):
    found = [(where, c) for where, c in gputide_containers(overlay) if _serves(c)]
    assert found or overlay == "overlays/with-dcgm-exporter"
    for where, container in found:
        assert _imports(container) == [CONFIGMAP], f"{overlay}: {where} does not read {CONFIGMAP}"
        assert not any(e.get("name") == LISTEN_ENV for e in container.get("env", ())), where   # env would win


@pytest.mark.parametrize(("overlay", "components", "servers"), [
    ("overlays/scheduler", ("power-cap", "listen-address"), 4),   # controller, scheduler, power-cap agent, exporter
    ("overlays/sharded", ("listen-address",), 3),                 # two controller shards, the exporter
])
def test_the_component_binds_every_server_on_its_address(tmp_path, monkeypatch, overlay, components, servers):
    rendered = render_over(tmp_path, overlay, components)
    (config,) = [o for o in rendered if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(CONFIGMAP)]
    assert config["metadata"]["namespace"] == "gputide" and config["data"] == {LISTEN_ENV: "::"}
    seen = 0
    for obj in (o for o in rendered if o["kind"] in WORKLOADS):
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if "gputide" not in container.get("image", "") or not _serves(container):
                continue
            assert _imports(container) == [config["metadata"]["name"]], (obj["metadata"]["name"], container["name"])
            monkeypatch.setenv(LISTEN_ENV, config["data"][LISTEN_ENV])   # as the kubelet sets it from envFrom
            assert _listen(build_parser().parse_args(container["args"])) == "::", container["name"]
            seen += 1
    assert seen == servers


def test_without_the_component_no_address_is_set(monkeypatch):
    monkeypatch.delenv(LISTEN_ENV, raising=False)
    for where, container in gputide_containers("overlays/scheduler"):
        assert _listen(build_parser().parse_args(container["args"])) is None, where   # every address (bind)
