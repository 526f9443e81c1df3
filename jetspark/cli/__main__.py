"""``python -m jetspark.cli``."""

from jetspark.cli.app import main

main()
