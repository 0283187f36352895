"""The Eviction API on kmock (issue 26): kmock 0.8 serves objects but no subresource (an
eviction ``POST .../pods/NAME/eviction`` is a 404 "Endpoint Not Found"), so the tests add
the API server's own response as a kmock reaction, modelled on kube-apiserver's eviction
REST (``pkg/registry/core/pod/storage/eviction.go``): a pod covered by a
PodDisruptionBudget (``policy/v1``, ``spec.selector.matchLabels`` within the pod's labels)
whose ``status.disruptionsAllowed`` is 0 is refused with ``429 TooManyRequests`` and the
server's message and cause; otherwise the budget's allowance is used up by one and the pod
is deleted (``201`` Status Success). This is the fake API server's behaviour, not gpufleet's.
"""

from __future__ import annotations

from typing import Any

import kmock

PDB = "policy/v1/poddisruptionbudgets"


def _status(code: int, status: str, message: str = "", reason: str = "",
            causes: list[dict[str, str]] | None = None) -> Any:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": status, "code": code}
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if causes:
        body["details"] = {"causes": causes}
    return kmock.Response(status=code, payload=body)


def serve_evictions(k: Any) -> None:
    """Add the eviction subresource to emulator ``k`` (a :class:`tests.export.test_k8s_sync.
    Kmock` ``setup``)."""

    def evict(req: Any) -> Any:
        key = ("v1/pods", req.namespace, req.name)
        try:
            pod = k.objects[key]
        except KeyError:
            pod = None
        if pod is None or pod.deleted:
            return _status(404, "Failure", f'pods "{req.name}" not found', "NotFound")
        labels = (pod.raw.get("metadata") or {}).get("labels") or {}
        budgets = []
        for rkey in list(k.objects):
            res, ns, _ = rkey
            obj = k.objects[rkey]
            if getattr(res, "plural", "") != "poddisruptionbudgets" or ns != req.namespace:
                continue
            if obj.deleted:
                continue
            want = ((obj.raw.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if want and all(labels.get(a) == b for a, b in want.items()):
                budgets.append(obj)
        for b in budgets:
            st = b.raw.get("status") or {}
            if int(st.get("disruptionsAllowed", 0)) <= 0:
                name = b.raw["metadata"]["name"]
                need = (b.raw.get("spec") or {}).get("minAvailable", "?")
                return _status(
                    429, "Failure",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    "TooManyRequests",
                    [{"reason": "DisruptionBudget",
                      "message": f"The disruption budget {name} needs {need} healthy pods "
                                 f"and has {st.get('currentHealthy', '?')} currently"}])
        for b in budgets:
            allowed = int((b.raw.get("status") or {}).get("disruptionsAllowed", 0))
            b.patch({"status": {"disruptionsAllowed": allowed - 1}})
        pod.delete()
        return _status(201, "Success")

    k[kmock.subresource("eviction")] << evict
