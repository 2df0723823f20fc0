"""pgqueue: a message queue inside PostgreSQL. The Python client, worker and command line."""

from __future__ import annotations

__version__ = "0.1.0"
