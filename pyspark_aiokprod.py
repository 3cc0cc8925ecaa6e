"""PySpark finds ``format("aiokprod")`` here: no ``aiokprod.spark.register(spark)`` needed.

PySpark 4's Python Data Source API looks, once per Spark application, for top-level modules
whose names start with ``pyspark_`` and registers the ``DefaultSource`` each one exports under
the name that class gives (``AiokprodDataSource.name()``: ``aiokprod``). Installing aiokprod
installs this module next to the ``aiokprod`` package, so ``df.write.format("aiokprod")`` and
``df.writeStream.format("aiokprod")`` work in any session of an environment that has aiokprod,
pyspark >= 4.0 and pyarrow (docs/spark.md). Without them this module exports nothing, rather
than failing the lookup of every Python data source of the application.
"""

from __future__ import annotations

__all__ = ["DefaultSource"]

try:
    from aiokprod.spark.source import AiokprodDataSource as DefaultSource
except ImportError:  # no pyspark >= 4.0 or no pyarrow: Spark then knows no format("aiokprod")
    __all__ = []
