"""AMD Instinct GPUs: ``rocm-smi --json``."""
