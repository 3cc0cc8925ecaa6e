"""FastAPI: one producer for the life of the app, ``await producer.send(...)`` in a handler.

The producer is opened in the app's lifespan (so it starts with the app and is closed, with
every accepted record delivered, when the app shuts down) and handed to handlers through
``app.state`` and a dependency. Run it against any broker::

    pip install aiokprod fastapi uvicorn
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 EVENTS_TOPIC=events \\
        uvicorn examples.fastapi_app:app --port 8000
    curl -X POST localhost:8000/events -H 'content-type: application/json' \\
        -d '{"user": "u-7", "action": "login"}'
    # {"topic":"events","partition":2,"offset":41}

or with the project's local Kafka (the topic is created first)::

    python -m aiokprod.testing exec --topic events:3 -- uvicorn examples.fastapi_app:app

tests/integration/test_fastapi_example.py drives it with FastAPI's TestClient;
tests/integration/test_examples.py runs the ``exec`` command above and POSTs to it.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

from aiokprod import KafkaError, Producer


class Event(BaseModel):
    """The request body: who did what."""

    user: str
    action: str


class Delivered(BaseModel):
    """Where the broker stored the record."""

    topic: str
    partition: int
    offset: int


def get_producer(request: Request) -> Producer:
    """The app's producer (a dependency, so a test can override it)."""
    producer: Producer = request.app.state.producer
    return producer


def create_app(bootstrap_servers: str, topic: str) -> FastAPI:
    """A FastAPI app that writes every POST /events to ``topic``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # acks=all and idempotence are the defaults; linger_ms batches concurrent requests.
        async with Producer(bootstrap_servers, client_id="fastapi-example") as producer:
            app.state.producer = producer
            yield
        # leaving the block closed the producer: every accepted record was delivered

    app = FastAPI(lifespan=lifespan)

    @app.post("/events", status_code=201)
    async def post_event(
        event: Event, producer: Annotated[Producer, Depends(get_producer)]
    ) -> Delivered:
        try:
            # send() returns once the record is buffered; awaiting the delivery waits for
            # the broker's acknowledgement. Return right after send() for fire-and-forget.
            delivery = await producer.send(topic, event.model_dump_json(), key=event.user)
            metadata = await delivery
        except KafkaError as exc:
            raise HTTPException(status_code=503, detail=f"not stored: {exc}") from exc
        return Delivered(topic=metadata.topic, partition=metadata.partition, offset=metadata.offset)

    return app


app = create_app(
    os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    os.environ.get("EVENTS_TOPIC", "events"),
)
