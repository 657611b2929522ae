"""gputide's Grafana dashboards as code.

Each module in this package builds one dashboard with grafana-foundation-sdk (Grafana's own typed schema,
pinned to the Grafana 11.6 schema in pyproject.toml). `python -m dashboards.build` turns them into the committed
`dashboards/*.json`; a test rebuilds them and fails when the JSON is out of date, and `dashboards.lint` holds the
lint rules (in the spirit of grafana/dashboard-linter) every dashboard must pass.

Panels read the normalised recording-rule series and the controller's `gputide_*` series of docs/metrics.md,
never raw DCGM names, so they work the same behind our exporter and behind an existing dcgm-exporter.
"""
