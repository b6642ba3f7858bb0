"""The ``tidemark`` command line: a thin face over the packages."""
