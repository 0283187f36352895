"""Inspection (observe, rules, guard, act, reports), remediation and its steps, parts, failures and
the health metrics.
"""
