"""The exactly-once protocol as it was at 6680b29 (issue 41's "before"), frozen for one test.

``tests/model/test_eos_model.py`` shows that the model checker finds issue 41's defects in
it - a replayed micro-batch whose rewrite is never committed, a batch job committed in part,
a straggler's transaction left open - so that the checker's silence about today's protocol
means something. Nothing else imports these modules; they are not the client's code.
"""
