"""Telemetry: how gputide gets its view of the fleet out of Prometheus.

`promserver` starts and stops a real, project-managed Prometheus (for the demo, the tests and
`gputide prometheus`); the PromQL telemetry source that turns the normalised series of `rules/` into an
immutable snapshot lives next to it. This package never imports the Kubernetes client.
"""
