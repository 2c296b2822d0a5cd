"""Handlers used by the integration, acceptance and chaos tests."""
