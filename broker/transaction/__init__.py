"""Transactional messages (Apache RocketMQ 4.x's two-phase send), docs/operations.md#transactions.

half.py builds the messages of each step, state.py holds what is resolved and persists the check
progress, service.py ends half messages exactly once and runs the check; apache.py ends and checks as Apache
RocketMQ 4.9 does (`flavor=apache`).
"""
