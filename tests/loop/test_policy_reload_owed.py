"""`PolicyReloader(on_leave=...)` without `office`: a give-back that raised, or whose namespaces `on_leave` returns
as not given back (a standby's: `cmd.run.floors_given_back`), is handed over again at every later poll until it
succeeds (audit a5, floors.py: before, once, only at the reload that protected the namespace)."""

from __future__ import annotations

from types import SimpleNamespace

from test_policy_reload import write

from balancer.app.policy_reload import PolicyReloader
from balancer.cmd.run import floors_given_back
from balancer.config import load


class Actuator:
    def __init__(self, fail: int = 0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def restore_floors(self, namespaces):
        self.calls.append(tuple(namespaces))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("API server 503")
        return []


def protect_team_a(tmp_path, actuator, loop) -> PolicyReloader:
    path = tmp_path / "policy.yaml"
    write(path, "capacity: {enabled: true}\n")
    r = PolicyReloader(path, load(path), on_leave=floors_given_back(actuator, object(), lambda: loop))
    r.poll()
    write(path, "capacity: {enabled: true}\nsafety: {protectedNamespaces: [team-a]}\n")
    assert r.poll() is not None
    return r


def test_a_standby_at_the_reload_gives_them_back_once_it_leads(tmp_path) -> None:
    actuator, loop = Actuator(), SimpleNamespace(leading=False)
    r = protect_team_a(tmp_path, actuator, loop)
    r.poll()
    assert actuator.calls == []
    loop.leading = True
    for _ in range(3):
        r.poll()
    assert actuator.calls == [("team-a",)]


def test_a_give_back_that_raised_is_tried_again_until_it_succeeds(tmp_path, caplog) -> None:
    actuator = Actuator(fail=2)
    r = protect_team_a(tmp_path, actuator, SimpleNamespace(leading=True))
    assert actuator.calls == [("team-a",)] and any("not given back" in m for m in caplog.messages)
    for _ in range(4):
        r.poll()
    assert actuator.calls == [("team-a",)] * 3
    assert sum("not given back" in m for m in caplog.messages) == 1   # said once while it keeps failing
