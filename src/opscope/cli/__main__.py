"""``python -m opscope.cli``: the same as the ``opscope`` command."""

from opscope.cli.app import main

main()
