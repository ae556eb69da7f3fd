"""``activate_session``: make ``save()`` work from a Python thread other than the main one.

Spark looks a Python data source up in the *active* session of the calling JVM thread. PySpark
runs each Python thread on its own JVM thread (pinned thread mode), and a new one has no active
session, so ``df.write.format("amqp").save()`` from a ``threading.Thread`` fails with
``DATA_SOURCE_NOT_FOUND: amqp`` even though the data source is registered. Calling
``activate_session(spark)`` first in that thread sets the session as its active one (what
``spark.createDataFrame`` does internally).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

__all__ = ["activate_session"]


def activate_session(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread (Python and JVM side).

    Args:
        spark: The session ``AmqpDataSource`` was registered in.
    """
    jvm = spark._jvm
    assert jvm is not None, "a classic (non-Connect) session has a JVM gateway"
    SparkSession._activeSession = spark
    SparkSession._get_j_spark_session_class(jvm).setActiveSession(spark._jsparkSession)
