"""Canary campaigns: waves, gates, approvals and rollback."""
