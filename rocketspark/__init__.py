"""rocketspark: RocketMQ for PySpark."""

__version__ = "0.1.0"
