"""``python -m control_plane.cli``: the same as the ``crank`` script."""

from control_plane.cli import main

raise SystemExit(main())
