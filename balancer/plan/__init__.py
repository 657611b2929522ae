"""Pure planning: decide what to do from a snapshot, never do it.

Everything under `balancer.plan` is side-effect free: no clock, no network, no globals. Sub-packages:
`placement` (filter/score plugins over numpy arrays of nodes and GPU slots, named policies, the FGD replay),
`defrag` (bounded consolidation moves and the fragmentation metric) and `queueing` (anti-starvation:
priority aging, backfill with reservations, wait reports). The reconcile loop, the simulator and the CLI
call these functions; they own the side effects.
"""
