"""The operation engine: spec, compiler, request builder, upstream call, selector, errors."""
