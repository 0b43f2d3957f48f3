"""The ``kafka`` port with real clients, part two: groups, idempotence, limits, admin, fetch,
robustness, kcat, security. (Part one: ``../test_kafka_protocol.py``.)

Every test runs a real ``logkeeper serve --kafka-port 0`` process on loopback. Clients:
confluent-kafka (librdkafka 2.x), kafka-python, kcat, and :class:`RawClient` for requests that
must be exactly what the test means (duplicates, acks=0, corrupt CRCs, oversize batches). The
fixtures (a root with three topics, a served worker) are in ``conftest.py``, the client helpers
in ``clients.py``.
"""
