"""`gputide run` hands the namespaces a policy reload newly protects to the Kubernetes actuator's
`restore_floors`, on the leading replica only (every replica reloads the file; a standby must not write), and only
when capacity shifting raised floors at all (`cmd.run.floors_given_back`)."""

from __future__ import annotations

from types import SimpleNamespace

from test_policy_reload import write

from balancer.app.policy_reload import PolicyReloader
from balancer.cmd.run import floors_given_back
from balancer.config import load


class Actuator:
    def __init__(self) -> None:
        self.restored: list[tuple[str, ...]] = []

    def restore_floors(self, namespaces):
        self.restored.append(tuple(namespaces))
        return [f"restored {ns}" for ns in namespaces]


def reload_protecting(tmp_path, leave) -> None:
    path = tmp_path / "policy.yaml"
    write(path, "safety: {protectedNamespaces: [kube-system]}\n")
    r = PolicyReloader(path, load(path), on_leave=leave)
    write(path, "safety: {protectedNamespaces: [kube-system, serve]}\n")
    assert r.poll() is not None


def test_the_leader_gives_the_floors_back(tmp_path) -> None:
    actuator = Actuator()
    reload_protecting(tmp_path, floors_given_back(actuator, object(), lambda: SimpleNamespace(leading=True)))
    assert actuator.restored == [("serve",)]


def test_a_standby_leaves_them_to_the_leader(tmp_path, caplog) -> None:
    actuator = Actuator()
    caplog.set_level("INFO")
    reload_protecting(tmp_path, floors_given_back(actuator, object(), lambda: SimpleNamespace(leading=False)))
    assert actuator.restored == []
    assert any("given back by the leading replica" in m for m in caplog.messages)


def test_nothing_to_give_back_without_capacity_shifting_or_a_kubernetes_actuator() -> None:
    assert floors_given_back(Actuator(), None, lambda: SimpleNamespace(leading=True)) is None
    assert floors_given_back(object(), object(), lambda: SimpleNamespace(leading=True)) is None
