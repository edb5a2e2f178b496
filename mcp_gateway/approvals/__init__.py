"""Human approval: the ``approvals`` table's statements (store), the worker that
runs approved calls (worker, execution, finishing, wakeups, expiry), the calls
waiting for a decision (waiters) and approvals as tasks (tasks). Import the
modules themselves: this package imports none of them."""
