"""The built-in accelerator vendor plugins (issue 15): one module or package per vendor, named
after it, whose ``PLUGIN`` (:class:`gpufleet.domain.vendors.VendorPlugin`) declares all
gpufleet knows of the vendor. Found by :mod:`gpufleet.domain.vendors` (nothing lists them);
other distributions add vendors through the entry point group ``gpufleet.vendors``.

Each plugin holds pure parsers for its vendor's tools (real captures only), its labels and its
exports, all producing :mod:`gpufleet.domain.accelerators` records; plugins import only the
domain (import-linter checks it). This module stays empty: discovery lists the package.
"""
