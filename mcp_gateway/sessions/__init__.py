"""MCP sessions of the 2025 era: signed ids any replica checks without a database
(``signer``), and the ended sessions every replica refuses (``terminations``;
docs/architecture.md, "Sessions")."""
