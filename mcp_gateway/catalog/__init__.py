"""The published catalog in memory: snapshot, refresher, keys, tools/list pages."""
