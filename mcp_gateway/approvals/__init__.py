"""Human approval: the gate's pending rows (requests), their store, the
approval-key endpoints, and the worker that runs approved calls (execution,
leases, worker). Import the modules themselves: this package imports none of
them, so none of them can loop back through it."""
