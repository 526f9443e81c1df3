"""``python -m jetspark.demo``: the demo, as ``jetspark demo`` runs it."""

from jetspark.demo import main

raise SystemExit(main())
