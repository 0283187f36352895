"""Per-vendor accelerator plugins (issue 15): one package per vendor.

Each package holds pure parsers for its vendor's tools (real captures only), its label
builder and its checks, all producing :mod:`gpufleet.domain.accelerators` records.
"""
