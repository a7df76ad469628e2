"""Where the pods keep their run from inside the cluster (`aichor:history*`, `aichor:mlflow*`),
and the checks of a store's and a service's URLs."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from ..rules.limits import is_dns_label
from .concerns import Concern, object_names


class Keeping(Concern):
    """Runs kept from inside the cluster: object storage and MLflow (docs/stores.md)"""

    history: str | None = Field(
        None,
        description="Where each pod writes its part of the run's record as it runs: an "
        "absolute path or file:// URL on a volume the pods mount, s3://bucket/prefix (any "
        "S3-compatible store), gs://bucket/prefix (GCS's XML API, HMAC keys), or "
        "az://container/prefix (Azure Blob Storage).",
    )
    history_secret: str | None = Field(
        None,
        description="Secret holding the store's keys as the AWS SDKs name them "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional AWS_SESSION_TOKEN), or for az:// "
        "as the Azure CLI does (AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY); unset, the pods "
        "write unsigned, which a store refuses unless anyone may write (validate warns).",
    )
    history_endpoint: str | None = Field(
        None,
        description="The store's endpoint (AWS_ENDPOINT_URL: MinIO, Ceph; unset: AWS's, or "
        "GCS's for gs://; for az://, the account's blob endpoint: Azurite's).",
    )
    history_region: str | None = Field(None, description="The bucket's region (AWS_REGION).")
    mlflow: str | None = Field(
        None,
        description="MLflow tracking URI (http:// or https://): each experiment a run, a "
        "sweep's trials nested under its run.",
    )
    mlflow_secret: str | None = Field(
        None,
        description="Secret holding MLflow's credentials as its client names them "
        "(MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD).",
    )
    mlflow_experiment: str = Field(
        "aichor", min_length=1, max_length=500, description="The MLflow experiment of the runs."
    )

    @field_validator("history")
    @classmethod
    def _history(cls, value: str | None) -> str | None:
        return None if value is None else history_url(value)

    @field_validator("mlflow", "history_endpoint")
    @classmethod
    def _service(cls, value: str | None) -> str | None:
        return None if value is None else service_url(value)

    # (named apart from Placement's `_secrets`: a validator of the same name replaces it)
    @field_validator("history_secret", "mlflow_secret")
    @classmethod
    def _store_secrets(cls, value: str | None) -> str | None:
        return object_names(value)

    @property
    def keeps(self) -> bool:
        """Whether the pods keep their run (a keeper beside each)."""
        return bool(self.history or self.mlflow)


HISTORY_SCHEMES = ("file", "s3", "gs", "az")


def history_url(value: str) -> str:
    """A store's URL, checked: an absolute path, file://, s3:// or gs:// with a bucket, az://
    with a container, no credentials in it (they go in a Secret: a URL is rendered in the
    pods' spec)."""
    parts = urlsplit(value)
    if not parts.scheme and value.startswith("/"):
        return value
    if parts.scheme not in HISTORY_SCHEMES:
        raise ValueError(
            f"{value!r}: give an absolute path, file://, s3://bucket, gs://bucket or az://container"
        )
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        raise ValueError(f"{value!r}: a file URL is file:///absolute/path")
    if parts.scheme != "file" and not is_dns_label(parts.netloc.replace(".", "-")):
        raise ValueError(f"{value!r}: give the bucket's (container's) name after {parts.scheme}://")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: no query or fragment (a bucket and a prefix)")
    return value


def service_url(value: str) -> str:
    """An http(s) URL of a service, without credentials (they go in a Secret)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r}: give an http:// or https:// URL")
    if parts.username or parts.password:
        raise ValueError(
            "a URL with credentials would be rendered in the pods' spec: give the URL "
            "without them and put them in the Secret (aichor:mlflowSecret, "
            "aichor:historySecret)"
        )
    return value.rstrip("/")
