"""Pure functions ``Trace -> pyarrow.Table``: what the commands show, computed once, rendered anywhere."""
