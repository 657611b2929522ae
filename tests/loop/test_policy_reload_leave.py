"""`PolicyReloader(on_leave=...)`: a valid reload that protects namespaces the running policy did not hands them
over once (their services leave gputide's management, whose HPA floors are then given back); nothing else does (an
invalid file, a namespace unprotected, an unchanged file), and a failing hand-over does not undo the reload."""

from __future__ import annotations

from test_policy_reload import write

from balancer.app.policy_reload import PolicyReloader, newly_protected
from balancer.config import BalancerPolicy, load


def reloader(tmp_path, left: list, protected: str = "[kube-system]", fail: bool = False):
    path = tmp_path / "policy.yaml"
    write(path, f"safety: {{protectedNamespaces: {protected}}}\n")

    def on_leave(namespaces):
        left.append(namespaces)
        if fail:
            raise RuntimeError("API down")

    return path, PolicyReloader(path, load(path), on_leave=on_leave)


def test_only_namespaces_newly_protected_are_handed_over_once(tmp_path) -> None:
    left: list = []
    path, r = reloader(tmp_path, left)
    assert r.poll() is None and left == []
    write(path, "safety: {protectedNamespaces: [kube-system, serve, batch]}\n")
    assert r.poll() is not None and left == [("batch", "serve")]
    assert r.poll() is None and left == [("batch", "serve")]   # unchanged: not again
    write(path, "safety: {protectedNamespaces: [kube-system, serve], evictionBudget: -1}\n")   # invalid
    assert r.poll() is None
    write(path, "safety: {protectedNamespaces: [kube-system]}\n")   # unprotected: managed again, nothing to give
    assert r.poll() is not None and left == [("batch", "serve")]


def test_a_failing_hand_over_is_logged_and_the_reload_stands(tmp_path, caplog) -> None:
    left: list = []
    path, r = reloader(tmp_path, left, fail=True)
    r.poll()
    write(path, "safety: {protectedNamespaces: [kube-system, serve]}\n")
    new = r.poll()
    assert new is not None and new.safety.protected_namespaces == ("kube-system", "serve") and r.current is new
    assert left == [("serve",)] and any("not given back" in m for m in caplog.messages)


def test_newly_protected() -> None:
    old = BalancerPolicy().with_section("safety", protected_namespaces=("a", "b"))
    assert newly_protected(old, old.with_section("safety", protected_namespaces=("c", "b"))) == ("c",)
    assert newly_protected(old, old.with_section("safety", protected_namespaces=("a",))) == ()
