"""The version of the Python package, in one place (pyproject.toml reads it from here).

Its major.minor is the pgqueue SQL version this client works with: :func:`pgqueue.check_server`
refuses a database whose pgqueue differs in major.minor.
"""

__version__ = "0.4.0"

#: The name of the distribution on PyPI (the import name and the command stay ``pgqueue``; the
#: PyPI project named ``pgqueue`` is an unrelated package).
DISTRIBUTION = "pgqueue-sql"
