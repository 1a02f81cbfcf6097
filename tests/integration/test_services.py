"""Smoke test: the RabbitMQ and MongoDB wire-protocol server that `make test` starts answer."""

from __future__ import annotations

import uuid

import pymongo
from kombu import Connection, Exchange, Queue


def test_rabbitmq_round_trip(broker_url: str) -> None:
    name = f"sweepstack.smoke.{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name, auto_delete=True)
    with Connection(broker_url, connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
        with conn.Producer() as producer:
            producer.publish(
                {"trial": "x"},
                exchange=queue.exchange,
                routing_key=name,
                declare=[queue],
                serializer="json",
            )
        simple = conn.SimpleQueue(queue)
        message = simple.get(timeout=5)
        assert message.payload == {"trial": "x"}
        message.ack()
        simple.close()
        queue(conn.channel()).delete()


def test_mongo_round_trip(mongo_url: str, db_name: str) -> None:
    client = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        coll = client[db_name]["smoke"]
        coll.insert_many([{"_id": i, "state": "queued"} for i in range(10)])
        result = coll.update_one({"_id": 3, "state": "queued"}, {"$set": {"state": "running"}})
        assert result.modified_count == 1
        assert coll.count_documents({"state": "running"}) == 1
    finally:
        client.drop_database(db_name)
        client.close()
