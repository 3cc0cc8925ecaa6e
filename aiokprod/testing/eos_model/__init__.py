"""A model checker for the Spark sink's exactly-once protocol (docs/spark.md, "Model-checked").

``python -m aiokprod.testing.eos_model`` explores every interleaving and crash point of small
configurations, driving the sink's real decision code against a model of Kafka's
transaction coordinator and of Spark's scheduling: :mod:`.kafka` (the coordinator, offsets,
records), :mod:`.scheduler` (real asyncio code, one Kafka call at a time), :mod:`.spark`
(jobs, micro-batches, attempts, faults), :mod:`.explore` (the search), :mod:`.invariants`
(what must hold).
"""
