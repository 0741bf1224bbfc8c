"""``python -m jitbench.cli``: the same as the ``jitbench`` console script."""

from jitbench.cli import main

main()
