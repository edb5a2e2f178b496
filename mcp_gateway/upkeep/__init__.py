"""What runs beside the requests: call log, metrics, retention, replica heartbeat."""
