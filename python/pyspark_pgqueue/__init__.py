"""Auto-registration of the ``pgqueue`` format for PySpark.

On first use of a data source name it does not know, PySpark imports every top-level module whose
name starts with ``pyspark_`` and registers its ``DefaultSource`` (SPARK-45917). With this
package installed next to pgqueue, ``spark.read.format("pgqueue")`` works without calling
:func:`pgqueue.spark.register`.
"""

from __future__ import annotations

from pgqueue.spark import PgQueueDataSource as DefaultSource

__all__ = ["DefaultSource"]
