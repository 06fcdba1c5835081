"""The ``kafka`` sink: each micro-batch's change rows as Debezium, Canal or changelog JSON
messages, in one Kafka transaction with the batch id (exactly once)."""

from sparkcdc.sinks.kafka.config import KafkaConfig
from sparkcdc.sinks.kafka.sink import KafkaSink

__all__ = ["KafkaConfig", "KafkaSink"]
