"""The official ``kubernetes`` client, connected once (``pip install gpufleet[k8s]``): the
base of every gpufleet client of a Kubernetes API (node sync and capacity in
``service/exports``, drain and DRA device taints here). Every failing call is a
:class:`~gpufleet.errors.ConfigError` naming what was asked and the API's answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.errors import ConfigError, KubeApiError


class KubeClient:
    """A connection: ``kubeconfig`` None: ``KUBECONFIG`` / ``~/.kube/config``, else the
    in-cluster service account."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        try:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException
        except ImportError:
            raise ConfigError(
                setting="k8s",
                cause="the kubernetes client is not installed (pip install 'gpufleet[k8s]')",
            ) from None
        try:
            if kubeconfig is not None:
                api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(kubeconfig)
                )
            else:
                try:
                    config.load_kube_config()  # type: ignore[no-untyped-call]
                except (ConfigException, OSError):
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                api_client = client.ApiClient()
        except (ConfigException, OSError, ValueError) as exc:
            where = str(kubeconfig) if kubeconfig else "KUBECONFIG / ~/.kube/config / in-cluster"
            raise ConfigError(setting="kubeconfig", cause=f"{where}: {exc}") from None
        self.api_client = api_client
        self.api = client.CoreV1Api(api_client)
        self.host = str(api_client.configuration.host)

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kw)
        except ApiException as exc:
            raise KubeApiError(
                setting="k8s",
                cause=f"{what} at {self.host}: HTTP {exc.status} {exc.reason}",
                status=int(exc.status or 0),
                body=str(exc.body or ""),
            ) from None
        except HTTPError as exc:
            raise ConfigError(
                setting="k8s", cause=f"cannot reach the Kubernetes API at {self.host}: {exc}"
            ) from None
