"""JSON bodies of remoting commands (route data, registrations, heartbeats, ...)."""
