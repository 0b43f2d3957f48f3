"""The worker's Kafka protocol listener (the ``kafka`` port).

:mod:`~storageworker.kafka.wire` holds the protocol's primitive types (fixed-width integers,
varints, strings, bytes, arrays, their compact forms and tagged fields) and the request and
response headers; :mod:`~storageworker.kafka.apis` decodes requests and encodes responses of
each API at the versions the worker advertises, and answers them against the worker's logs;
:mod:`~storageworker.kafka.server` is the asyncio listener (framing, limits, one response per
request in order).
"""
