"""Delayed messages: the delay levels and how a delayed message is parked in SCHEDULE_TOPIC_XXXX and
comes back (`delay_levels`), the service whose timers store each one in its real queue when due,
once (`service`), and its progress in delayOffset.json with the deliveries a crash left uncounted
(`progress`)."""
