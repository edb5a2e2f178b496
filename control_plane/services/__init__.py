"""Database work of the control plane, one module per resource; handlers stay thin."""
