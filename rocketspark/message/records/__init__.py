"""RocketMQ's binary message records: their layout, whole-batch encoding and decoding, the scalar
codec for single sends and small pulls, and the SEND_BATCH_MESSAGE body."""
