"""``python -m jetspark``: the ``jetspark`` command line, as the console script runs it."""

from jetspark.cli.app import main

if __name__ == "__main__":
    main()
