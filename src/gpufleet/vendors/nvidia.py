"""NVIDIA: the vendor of ``nvidia-smi``'s GPUs. Its GPUs are collected by the core
(``collect/nvidia_smi``, ``HostFacts.gpus``) and labelled by GPU Feature Discovery's labels
(:func:`gpufleet.domain.labels.derive_labels`), so the plugin brings no collector and no
vendor labels: the extended resource ``nvidia.com/gpu``, the GRES ``gpu`` (written by the NVIDIA
path of :mod:`gpufleet.service.exports.slurm`), the runtime ``cuda``, groups ``gpu_<model>``.
"""

from __future__ import annotations

from gpufleet.domain.accelerator_exports import VendorExport
from gpufleet.domain.accelerators import AcceleratorInventory
from gpufleet.domain.vendors import Vendor, VendorPlugin

#: ``nvidia.com/gpu`` (as gpufleet.domain.k8s.GPU_RESOURCE; not imported: this module stays
#: light for ``gpufleet labels HOST``).
RESOURCE = "nvidia.com/gpu"


def _resource(_: AcceleratorInventory) -> str:
    return RESOURCE


PLUGIN = VendorPlugin(
    name=Vendor.NVIDIA,
    pci_vendor_id="10de",
    lspci_name="NVIDIA Corporation",
    exports=VendorExport(resource=_resource, gres_name="gpu", runtime="cuda"),
    description="NVIDIA GPUs",
)
