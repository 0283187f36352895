"""Decisions enforced where work runs: Ansible inventories, Kubernetes, Slurm, sync, Kubernetes
capacity.
"""
