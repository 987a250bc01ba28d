"""Where a cluster's backups are stored: a folder, or an S3-compatible bucket with a prefix.

An administrator sets one location per cluster. The credentials of a bucket stay in a Kubernetes
Secret of that cluster: Styrmin records only the Secret's namespace and name, so no answer, page, log
or Prefect parameter can hold them. A location is used once its cluster's agent has checked it (wrote,
read and deleted a probe object); until then, and when the check fails, the one in use stays.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from styrmin_backend.domain.errors import InvalidInput

ACCESS_KEY_ID_KEY = "access_key_id"
"""The key of the access key id in the location's Kubernetes Secret."""
SECRET_ACCESS_KEY_KEY = "secret_access_key"  # noqa: S105 (a key name, not a secret)
"""The key of the secret access key in the location's Kubernetes Secret."""

PROBE_NAME = ".styrmin-probe"
"""The object written, read back and deleted under the prefix when a location is checked."""


class LocationKind(StrEnum):
    """What kind of storage a location is."""

    FOLDER = "folder"
    S3 = "s3"


class LocationStatus(StrEnum):
    """Where a location set by an administrator is in its check."""

    CHECKING = "checking"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class BackupLocation:
    """A storage location for backups' files; credentials only by their Secret's reference."""

    kind: LocationKind
    folder: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    secret_namespace: str | None = None
    secret_name: str | None = None

    def describe(self) -> str:
        """The location as records and pages show it (never credentials).

        >>> BackupLocation(LocationKind.S3, bucket="b", prefix="p").describe()
        's3://b/p'
        """
        if self.kind is LocationKind.FOLDER:
            return f"folder {self.folder}"
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    @property
    def secret_reference(self) -> str | None:
        """``NAMESPACE/NAME`` of the Secret holding the credentials, or None (a folder needs none)."""
        return f"{self.secret_namespace}/{self.secret_name}" if self.secret_name else None

    def url(self, key: str) -> str:
        """Where one backup's files are: a folder path, or an ``s3://`` URL ending in ``/``."""
        if self.kind is LocationKind.FOLDER:
            return f"{self.folder}/{key}"
        return f"s3://{self.bucket}/{object_key(self.prefix, key)}/"

    def as_json(self) -> dict[str, Any]:
        """The location as stored and sent to the agent."""
        return {k: (v.value if isinstance(v, StrEnum) else v) for k, v in asdict(self).items() if v}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BackupLocation:
        """The location stored as ``data``."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "kind"}
        return cls(kind=LocationKind(data["kind"]), **fields)


def object_key(prefix: str, name: str) -> str:
    """``name`` under ``prefix``.

    >>> object_key("team/backups", "shop/backup-1")
    'team/backups/shop/backup-1'
    >>> object_key("", "shop/backup-1")
    'shop/backup-1'
    """
    return f"{prefix}/{name}" if prefix else name


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_REGION = re.compile(r"^[a-z0-9-]{1,32}$")


def check_location(
    kind: str,
    *,
    folder: str | None = None,
    bucket: str | None = None,
    prefix: str | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    secret: str | None = None,
) -> BackupLocation:
    """A valid location from what an administrator gave; raises InvalidInput naming the field.

    ``secret`` is ``NAMESPACE/NAME`` of the Kubernetes Secret holding the bucket's credentials.
    """
    try:
        location_kind = LocationKind(kind)
    except ValueError:
        raise InvalidInput(f'"{kind}" is not a kind of location; use folder or s3.', field="kind") from None
    if location_kind is LocationKind.FOLDER:
        extra = [n for n, v in (("bucket", bucket), ("endpoint_url", endpoint_url), ("secret", secret)) if v]
        if extra:
            raise InvalidInput(f"A folder location takes no {extra[0]}; give only folder.", field=extra[0])
        if not folder or not folder.startswith("/") or ".." in folder.split("/") or len(folder) > 400:
            raise InvalidInput(
                "Give the folder as an absolute path (at most 400 characters, no ..), e.g. /var/lib/backups.",
                field="folder",
            )
        return BackupLocation(LocationKind.FOLDER, folder=folder.rstrip("/") or "/")
    if folder:
        raise InvalidInput("An s3 location takes no folder; give bucket, prefix and secret.", field="folder")
    if not bucket or not _BUCKET.match(bucket):
        raise InvalidInput(
            f'"{bucket or ""}" is not a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens.',
            field="bucket",
        )
    clean_prefix = (prefix or "").strip("/")
    if clean_prefix and (not _PREFIX.match(clean_prefix) or len(clean_prefix) > 200):
        raise InvalidInput(
            f'"{prefix}" is not a prefix: words of letters, digits, ".", "_" and "-" joined by "/" '
            "(at most 200 characters).",
            field="prefix",
        )
    if clean_prefix and any(part == ".." for part in clean_prefix.split("/")):
        raise InvalidInput("A prefix has no .. in it.", field="prefix")
    if endpoint_url is not None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise InvalidInput(
                f'"{endpoint_url}" is not an endpoint URL: give http(s)://host[:port], without credentials.',
                field="endpoint_url",
            )
    if region is not None and not _REGION.match(region):
        raise InvalidInput(f'"{region}" is not a region, e.g. us-east-1.', field="region")
    namespace, _, name = (secret or "").partition("/")
    if not _DNS_LABEL.match(namespace) or not _SECRET_NAME.match(name):
        raise InvalidInput(
            "Give the Kubernetes Secret holding the bucket's credentials as NAMESPACE/NAME, e.g. "
            f"styrmin/backup-bucket; it must have the keys {ACCESS_KEY_ID_KEY} and {SECRET_ACCESS_KEY_KEY}.",
            field="secret",
        )
    return BackupLocation(
        LocationKind.S3,
        bucket=bucket,
        prefix=clean_prefix,
        endpoint_url=endpoint_url.rstrip("/") if endpoint_url else None,
        region=region,
        secret_namespace=namespace,
        secret_name=name,
    )
