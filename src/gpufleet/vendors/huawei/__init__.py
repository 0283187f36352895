"""Huawei Ascend NPUs: ``npu-smi``, ``hccn_tool`` and the driver/firmware/CANN version files."""

from gpufleet.vendors.huawei.plugin import PLUGIN as PLUGIN
