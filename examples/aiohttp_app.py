"""aiohttp: the producer lives in a ``cleanup_ctx``; handlers ``await producer.send(...)``.

``cleanup_ctx`` runs the code before ``yield`` at startup and the rest at shutdown, so
``async with Producer(...)`` fits it exactly: the producer is closed (every accepted record
delivered) when the server stops. Run it against any broker::

    pip install aiokprod aiohttp
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 EVENTS_TOPIC=events python examples/aiohttp_app.py
    curl -X POST 'localhost:8080/events?user=u-7' --data 'clicked'
    # {"topic": "events", "partition": 1, "offset": 12}

tests/integration/test_examples.py runs it on a loopback port with aiohttp's test server.
"""

import os
from collections.abc import AsyncIterator

from aiohttp import web

from aiokprod import KafkaError, Producer

PRODUCER = web.AppKey("producer", Producer)
TOPIC = web.AppKey("topic", str)


async def post_event(request: web.Request) -> web.Response:
    producer = request.app[PRODUCER]
    body = await request.read()
    try:
        delivery = await producer.send(
            request.app[TOPIC], body, key=request.query.get("user"), headers=[("via", b"aiohttp")]
        )
        metadata = await delivery  # the broker's acknowledgement
    except KafkaError as exc:
        raise web.HTTPServiceUnavailable(text=f"not stored: {exc}") from exc
    return web.json_response(
        {"topic": metadata.topic, "partition": metadata.partition, "offset": metadata.offset},
        status=201,
    )


def create_app(bootstrap_servers: str, topic: str) -> web.Application:
    """An aiohttp app that writes every POST /events body to ``topic``."""

    async def kafka_producer(app: web.Application) -> AsyncIterator[None]:
        async with Producer(bootstrap_servers, client_id="aiohttp-example") as producer:
            app[PRODUCER] = producer
            yield  # the app runs here; the producer closes after it stopped

    app = web.Application()
    app[TOPIC] = topic
    app.cleanup_ctx.append(kafka_producer)
    app.router.add_post("/events", post_event)
    return app


if __name__ == "__main__":
    web.run_app(
        create_app(
            os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
            os.environ.get("EVENTS_TOPIC", "events"),
        ),
        host="127.0.0.1",
        port=int(os.environ.get("PORT", "8080")),
    )
