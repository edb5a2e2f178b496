"""The approver inbox: a static page the gateway serves beside the approval-key
endpoints, for the people who hold an approval key (docs/mcp-interface.md,
"The approver inbox")."""
