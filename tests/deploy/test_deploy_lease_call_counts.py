"""The Lease-call counts the controller's time budgets rest on (balancer/app/health.py) follow the elector's retries
(balancer/actuate/k8s_leader.py): a renewal or a ledger save that meets a 409 for an edit of the Lease's metadata
alone reads the Lease again and writes again, up to TAKEOVER_CONFLICT_RETRIES times, and after SIGTERM the exit's
save and the release do so STOPPED_SAVE_RETRIES times. Raised there and not here, the liveness limit and the grace
period would promise less time than the writes can take."""
from balancer.actuate.k8s_leader import STOPPED_SAVE_RETRIES, TAKEOVER_CONFLICT_RETRIES
from balancer.app.health import LEASE_CALLS_AFTER_ACTING, LEASE_CALLS_AFTER_STOP, LEASE_CALLS_TO_RELEASE


def test_the_ledger_write_after_an_action_counts_every_retry_of_the_renewal_and_the_save():
    one_write = 2 * (1 + TAKEOVER_CONFLICT_RETRIES)   # a read and a write, then each re-read and write again
    assert LEASE_CALLS_AFTER_ACTING == 2 * one_write == 16


def test_after_sigterm_the_renewal_ends_at_its_conflict_and_the_save_retries_its_fewer_times():
    assert LEASE_CALLS_AFTER_STOP == 2 + 2 * (1 + STOPPED_SAVE_RETRIES) == 6


def test_the_release_counts_a_renewal_in_flight_and_its_write_again_after_sigterm():
    assert LEASE_CALLS_TO_RELEASE == 2 + 2 * (1 + STOPPED_SAVE_RETRIES) == 6
