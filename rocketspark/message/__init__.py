"""Messages: the Python types, RocketMQ's binary record codecs, and the one Arrow batch schema.

Everything that produces, stores, transfers or reads messages imports it from here.
"""
