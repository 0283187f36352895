"""The audit-log and collection vocabulary: what kind of event was recorded, how a
collection attempt ended.

Every row of the ``events`` table carries an :class:`EventKind`; the store refuses any other
string. Lifecycle *events* (what moves a host) are :class:`gpufleet.domain.states.Event`.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """What an audit-log row records (``gpufleet events --kind``)."""

    TRANSITION = "transition"
    """A lifecycle event was applied (self-transitions included); ``data`` has from/to/event."""

    ENROLLED = "enrolled"
    """A host was added (inventory, or ``collect --local``)."""

    UPDATED = "updated"
    """A host's inventory record changed; ``data`` has before/after."""

    CHANGE_DETECTED = "change-detected"
    """A collection found a hardware/software change against the previous snapshot."""

    CHANGE_DECLARED = "change-declared"
    """An operator declared a change (driver upgrade, reimage, swap)."""

    ALARM = "alarm"
    """Something an operator must look at (a changed SSH host key); the alarm itself is a
    row of the ``alarms`` table (:class:`AlarmKind`), this event says it was raised."""

    ALARM_ACKNOWLEDGED = "alarm-acknowledged"
    """An operator acknowledged an open alarm (``gpufleet alarms ack``): seen, being handled;
    it stays open."""

    ALARM_RESOLVED = "alarm-resolved"
    """An operator closed an alarm by hand (``gpufleet alarms resolve``, an audited admin act);
    ``data`` has the alarm and the reason."""

    PREFLIGHT = "preflight"
    """A node-local ``gpufleet preflight --post`` verdict (PASS / WARNING / CRITICAL /
    UNKNOWN); ``data`` has the verdict, recommended actions and findings."""

    HOST_KEY_PINNED = "host-key-pinned"
    """The host's SSH key was pinned on first use (or matched the operator's fingerprint)."""

    HOST_KEY_REKEYED = "host-key-rekeyed"
    """An operator accepted a new SSH host key (``hosts rekey``); ``data`` has the old
    fingerprint, the expected one (None: the next collection pins on first use) and why."""

    HOST_REMOVED = "host-removed"
    """A host was removed (``hosts remove``); the event keeps its name and last state (the
    host's earlier events stay, their host_id cleared)."""

    EVIDENCE = "evidence"
    """An active-test result (DCGM, NCCL, gpu-burn) was stored for a host; the result itself
    is a row of the ``evidence`` table (:class:`EvidenceKind`)."""

    BASELINE = "baseline"
    """A baseline was saved."""

    POOL = "pool"
    """A pool's baseline was set or changed."""

    PRUNED = "pruned"
    """Old fact snapshots were removed by ``gpufleet prune``."""

    LEASE_GRANTED = "lease-granted"
    """Hosts were allocated to an owner (``gpufleet allocate``); ``data`` has the lease."""

    LEASE_RESERVED = "lease-reserved"
    """Hosts were booked for a future window (``allocate --start``)."""

    LEASE_STARTED = "lease-started"
    """A reservation reached its start and its hosts were allocated (``gpufleet sweep``)."""

    LEASE_RENEWED = "lease-renewed"
    """A lease's expiry was moved (``leases renew``)."""

    LEASE_RELEASED = "lease-released"
    """A lease ended (``leases release``, or expiry under the ``release`` policy); its hosts
    went to ``reclaiming``."""

    LEASE_EXPIRED = "lease-expired"
    """A lease passed its expiry; the lease hooks (webhooks) were called."""

    LEASE_POLICY = "lease-policy"
    """A pool's lease policy was set (``leases policy``)."""

    ETA = "eta"
    """An expected-back time was set for a host in maintenance or quarantine."""

    K8S_SYNC = "k8s-sync"
    """``gpufleet k8s sync`` changed the host's Kubernetes node; ``data`` has the node and
    the changes (labels set/removed, taints added/removed, cordon)."""

    EXTERNAL_HOLD = "external-hold"
    """A sync saw the host's node held by someone else (Kubernetes: cordoned without
    gpufleet's record; Slurm: drained with a reason that is not gpufleet's), or no longer
    held; recorded on a change only. ``data``: system, node, held, detail. Campaigns skip
    hosts whose last observation is held (not taken over)."""

    SLURM = "slurm"
    """``gpufleet slurm sync`` drained or resumed the host's Slurm node; ``data`` has the
    action, the reason and Slurm's state before."""

    SLURM_RESERVATION = "slurm-reservation"
    """A lease's Slurm reservation (``gpufleet-lease-<id>``) created, updated or deleted by
    the Slurm sync (issue 26); ``data``: action, reservation, lease, fields set."""

    SLURM_DRAIN = "slurm-drain"
    """Before an action on the host (maintenance, remediation, a campaign step) its Slurm
    node was drained and its jobs waited for, or the wait was skipped (``--no-drain``);
    ``data``: outcome, jobs that blocked, seconds waited, no_drain."""


    BMC = "bmc"
    """An action on the host's BMC over Redfish (``gpufleet bmc set/power/sel-ack``,
    ``gpufleet reimage``); ``data`` has the action and what the BMC said (never a
    credential)."""

    TOKEN = "token"
    """An API token was created or revoked (``gpufleet token``, ``/api/v1/tokens``); ``data``
    has its name, role and expiry (never the token or its digest)."""

    API_CALL = "api-call"
    """A mutating API call (POST, PUT, PATCH, DELETE under ``/api/v1``) by a token, with the
    method, path and HTTP status in ``data`` (never the body); the actor is ``api:NAME``."""

    LEASE_HOST_UNHEALTHY = "lease-host-unhealthy"
    """The inspection (``gpufleet inspect``) found a critical fault on a leased host: the
    lease runs on (the job is not killed), its owner is told (this event, the lease hooks)."""

    CAMPAIGN = "campaign"
    """A change campaign was created, started, resumed, approved (by whom), paused, halted,
    aborted or completed (``gpufleet campaign``); ``data`` has the campaign and its ticket.
    The host changes a campaign makes are ``change-declared`` events carrying the ticket."""


    GPU_HEALTH = "gpu-health"
    """A GPU was marked unusable (or every GPU usable again) by validation under the pool's
    GPU fault policy, or a pool's health policy changed (``gpufleet pool health-policy``)."""

    REMEDIATION = "remediation"
    """A remediation step ran on the host (``gpufleet remediate``: restart-service, reset-gpu,
    reboot, power-cycle, service-request); ``data`` has the action, GPUs, outcome and the
    remediation record id."""

    RECLAIM_WAIVED = "reclaim-waived"
    """An operator let a host that owes a passing reclaim out without one
    (``unquarantine --force --reason``, operator role or above); ``data`` has what the reclaim
    had found and the reason. The host still goes through validation."""

    RECLAIM_CLEANUP = "reclaim-cleanup"
    """One action of a pool's reclaim cleanup (``reclaim policy POOL --clean``) on the host:
    the lessee's processes killed, a data mount unmounted, a crontab removed; ``data`` has the
    action, its target and exit status."""

    CAPACITY_SHORT = "capacity-short"
    """Issue 26: a capacity gate (``capacity check``) found too few GPUs and exited 1; also
    sent as the ``capacity-short`` webhook (the on-call notice). ``data`` has the numbers
    (needed, allocatable, missing; with ``--k8s`` the scheduler's free GPUs per node)."""

class CollectionOutcome(StrEnum):
    """Per-host result of one collection attempt."""

    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth failed"
    HOST_KEY_CHANGED = "host key changed"
    TIMEOUT = "timeout"
    BAD_OUTPUT = "bad output"
    ERROR = "error"


class EvidenceKind(StrEnum):
    """An active test whose result is stored as evidence (``gpufleet evidence add/run KIND``).

    One spelling everywhere (CLI, ``evidence`` table); :attr:`check` is the name of the check
    that reads it (the key of the evidence mapping the checks receive)."""

    DCGM = "dcgm"
    """``dcgmi diag -r LEVEL -j`` (DCGM diagnostics)."""

    NCCL = "nccl"
    """nccl-tests (``all_reduce_perf``): bus bandwidth, wrong values."""

    GPU_BURN = "gpu-burn"
    """gpu-burn: every GPU OK or FAULTY under load."""

    RECLAIM = "reclaim"
    """The reclaim checks of a released host (``gpufleet reclaim``): what was left on it.
    Not an active test: validation does not read it."""

    @property
    def check(self) -> str:
        """The check (and evidence key) that reads this kind: dcgm_diag, nccl, gpu_burn."""
        return _EVIDENCE_CHECKS[self]


_EVIDENCE_CHECKS = {
    EvidenceKind.DCGM: "dcgm_diag",
    EvidenceKind.NCCL: "nccl",
    EvidenceKind.GPU_BURN: "gpu_burn",
    EvidenceKind.RECLAIM: "reclaim",
}


class AlarmKind(StrEnum):
    """What an alarm (``alarms`` table) is about."""

    HOST_KEY_CHANGED = "host-key-changed"
    """The host offered another SSH host key than the pinned one; collection refused."""

    DUPLICATE_HOST = "duplicate-host"
    """The host is the same machine (GPU UUIDs) as an earlier-enrolled host."""

    SLURM_NODE = "slurm-node"
    """Slurm itself says the host's node is unhealthy (its own drain: GPU count lower than
    configured, node failure, not responding; or the node DOWN), seen by ``slurm sync``."""

    K8S_GPUS_MISSING = "k8s-gpus-missing"
    """The host's Kubernetes node advertises fewer allocatable ``nvidia.com/gpu`` than the
    GPUs gpufleet validated (the device plugin lost some: "8 became 0")."""

    K8S_DRA_DEVICES_MISSING = "k8s-dra-devices-missing"
    """Issue 26: the DRA driver's ResourceSlices for the host's node list fewer devices than
    the GPUs gpufleet validated (``gpufleet k8s dra-sync``)."""

    K8S_NODE_NOT_READY = "k8s-node-not-ready"
    """The host's Kubernetes node is NotReady while gpufleet sees the host healthy."""

    BMC_IDENTITY = "bmc-identity"
    """The machine behind the host's BMC is not the one the inventory (or the first BMC
    read, or the in-band GPU serials) says: wrong cable or wrong inventory."""

    BMC_HEALTH = "bmc-health"
    """The BMC reports the system's health Critical; closed by a read that says otherwise."""

    BMC_SEL = "bmc-sel"
    """New Critical entries in the BMC's event log; closed only by an operator
    (``gpufleet bmc sel-ack``), never by the entry leaving the log."""

    SLURM_RESERVATION = "slurm-reservation"
    """The Slurm sync could not create, update or delete the reservation of a lease holding
    the host (the lease is not enforced in Slurm); closed once it is."""

    SLURM_FOREIGN_RESERVATION = "slurm-foreign-reservation"
    """Someone else's Slurm reservation covers the host's node (now or later): the host is
    held, out of placement and free capacity, until the reservation is gone."""

    HOST_UNREACHABLE = "host-unreachable"
    """The host could not be reached (refused, timeout, auth failure, host key changed) for
    the configured run of collections/inspections (``GPUFLEET_UNREACHABLE_ATTEMPTS`` /
    ``_MINUTES``); the message carries the BMC's view when one is configured. Closed by the
    next contact that reaches the host."""

    HEALTH = "health"
    """A health rule fired on the host (``gpufleet inspect``); ``data`` has the rule, GPU index
    and UUID or port, severity and recommended action. One open per rule and GPU/port; it
    closes once the finding cleared and (critical) the host passed validation again."""

    RACK_MANIFEST = "rack-manifest"
    """A rack (chassis serial, issue 27) does not hold what its rack model's manifest expects:
    a missing or an extra compute tray. Raised on the rack's first reporting tray in slot
    order (one alarm per rack), closed by a collection that finds the rack complete. A
    warning: it does not keep that tray out of placement."""

    RACK_DOMAIN = "rack-domain"
    """The hosts of one rack report different NVLink domains (clusterUuid); on the rack's
    first tray in slot order, closed when they agree again. A warning, like RACK_MANIFEST."""

    RACK_DRIFT = "rack-drift"
    """The trays of one rack (one NVLink domain) run different driver or GPU firmware
    versions (issue 27 item 7: a rack's trays must end a change on the same versions); on the
    rack's first tray, closed when they agree again. Not judged while a tray of the rack is in
    maintenance (a change window). A warning, like RACK_MANIFEST."""

    RACK_INCIDENT = "rack-incident"
    """Rack-scoped fabric findings from several hosts of one NVLink domain within the window
    (issue 27, ``GPUFLEET_RACK_INCIDENT_*``): one incident for the rack instead of one alarm
    per tray; on the domain's first tray, ``data`` has the domain, rack, affected hosts and
    whether draining the rack is recommended. Its hosts are restricted (out of NVLink-domain
    placement), not quarantined; closed by ``gpufleet racks resolve``, which re-validates
    them. Never keeps a host out of other placement."""

    OTHER = "other"
    """An alarm of the audit log migrated without a recognisable kind."""


class AlarmSeverity(StrEnum):
    """How urgent an alarm is."""

    WARNING = "warning"
    CRITICAL = "critical"
