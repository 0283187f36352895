"""Knowing each host: enroll, collect, fact snapshots, validation and evidence, baselines,
operations (maintenance, retire), labels, preflight, GPU health, reachability and the BMC.
"""
