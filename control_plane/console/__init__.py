"""The web console under ``/ui/``: server-rendered pages (Jinja2), htmx, one stylesheet.

``router.console_router`` assembles it; ``guard`` is what admission checks on a
console request; ``sessions`` holds sign-in. Design: docs/architecture.md,
"The console".
"""
