"""Actuators carry out planned actions: `sim`, `dryrun`, `kubernetes`. Dry-run is an actuator, not an `if`."""
