"""tools/call: validate, the safety gates, the upstream step, the result."""
