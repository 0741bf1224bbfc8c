"""``python -m jitbench``: the same as the ``jitbench`` console script (and
``python -m jitbench.cli``)."""

from jitbench.cli import main

main()
