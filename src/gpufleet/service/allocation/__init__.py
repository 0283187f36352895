"""Who gets which host: the placement index and candidates, allocation, leases and their expiry,
reclaim and its policy, capacity, holds.
"""
