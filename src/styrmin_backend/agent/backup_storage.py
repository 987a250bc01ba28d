"""Where the agent keeps backups' files: a folder, or an S3-compatible bucket through boto3.

Every backup's actions write into a folder the agent and the cluster's pods share (its *staging
folder*, ``STYRMIN_BACKUP_DIR`` in their Jobs). With a folder location that folder is the backup's
home; with a bucket the agent streams each file up once the backup hook has ended (multipart, a few
chunks in memory whatever the size), and back down before a restore hook runs. Files are hashed in
1 MiB chunks, so memory stays flat for any size.

Credentials of a bucket are read from the cluster's Secret when a location is used, kept in memory
only, and removed from every error message this module raises.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from styrmin_backend.domain.backup_locations import (
    ACCESS_KEY_ID_KEY,
    PROBE_NAME,
    SECRET_ACCESS_KEY_KEY,
    BackupLocation,
    LocationKind,
    object_key,
)
from styrmin_backend.domain.backups import BackupFile, check_file_name, missing_files

if TYPE_CHECKING:
    from styrmin_backend.cluster import ClusterAccess

MAX_BACKUP_FILES = 10_000
"""More files than this in one backup is refused: archive them into fewer."""

CHUNK_BYTES = 1 << 20
PART_BYTES = 8 << 20
"""Multipart uploads and downloads move parts of this size; at most TRANSFER_THREADS at once."""
TRANSFER_THREADS = 4


class StorageError(Exception):
    """A storage operation failed; the message names the operation and the object, never credentials."""


class BackupStorage(Protocol):
    """What the backup and restore workflows need from a storage location."""

    def describe(self) -> str:
        """The location as records and pages show it."""
        ...

    def staging(self, key: str) -> Path:
        """The folder the backup's Jobs write its files to and read them from."""
        ...

    def where(self, key: str) -> str:
        """Where one backup's files are kept, as errors name it."""
        ...

    def prepare(self, key: str) -> Path:
        """An empty staging folder for the backup hook's actions."""
        ...

    def publish(self, key: str) -> list[BackupFile]:
        """After the backup hook: store the files its actions wrote and return what was stored."""
        ...

    def fetch(self, key: str, recorded: list[BackupFile]) -> list[str]:
        """Before the restore hook: put the recorded files in the staging folder; what is wrong, if anything."""
        ...

    def finish_restore(self, key: str) -> None:
        """After the restore hook: drop what ``fetch`` put in the staging folder."""
        ...

    def delete(self, key: str) -> None:
        """Delete the backup's files; nothing to delete is not an error."""
        ...

    def probe(self) -> None:
        """Write, read back and delete a probe object; raises StorageError naming what failed."""
        ...

    def job_env(self, key: str) -> dict[str, Any]:
        """Beyond STYRMIN_BACKUP_DIR, what a backup Job is told about the location (no credentials)."""
        ...


def _hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _walk(folder: Path) -> Iterator[tuple[str, Path]]:
    """Each file under ``folder``, by its name relative to it, at most MAX_BACKUP_FILES."""
    if not folder.is_dir():
        return
    count = 0
    for directory, _, names in os.walk(folder):
        for name in sorted(names):
            count += 1
            if count > MAX_BACKUP_FILES:
                raise StorageError(
                    f"The backup's folder {folder} holds more than {MAX_BACKUP_FILES} files; archive them "
                    "into fewer."
                )
            path = Path(directory) / name
            try:
                relative = check_file_name(path.relative_to(folder).as_posix())
            except ValueError as error:
                raise StorageError(str(error)) from None
            yield relative, path


def folder_files(folder: Path) -> list[BackupFile]:
    """Every file under ``folder`` with its size and sha256."""
    found = [BackupFile(name, *_hash_file(path)) for name, path in _walk(folder)]
    return sorted(found, key=lambda f: f.name)


class BackupFolder:
    """A folder location: the agent and the cluster's pods reach it at the same path.

    On the embedded local cluster pods run on this machine; on a real cluster it is a volume (a
    PersistentVolumeClaim or hostPath) mounted at the same path in the agent and on the nodes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def describe(self) -> str:
        return f"folder {self.root}"

    def staging(self, key: str) -> Path:
        return self.root / key

    def where(self, key: str) -> str:
        return str(self.staging(key))

    def prepare(self, key: str) -> Path:
        folder = self.staging(key)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def publish(self, key: str) -> list[BackupFile]:
        return folder_files(self.staging(key))

    def files(self, key: str) -> list[BackupFile]:
        """The backup's files with their size and sha256."""
        return folder_files(self.staging(key))

    def fetch(self, key: str, recorded: list[BackupFile]) -> list[str]:
        return missing_files(recorded, folder_files(self.staging(key)))

    def finish_restore(self, key: str) -> None:
        return None  # the files stay: they are the backup

    def delete(self, key: str) -> None:
        shutil.rmtree(self.staging(key), ignore_errors=True)

    def probe(self) -> None:
        probe = self.root / PROBE_NAME
        content = os.urandom(16).hex()
        for doing, act in (
            ("create", lambda: self.root.mkdir(parents=True, exist_ok=True)),
            ("write", lambda: probe.write_text(content)),
            ("read", lambda: _same(probe.read_text(), content)),
            ("delete", probe.unlink),
        ):
            try:
                act()
            except (OSError, StorageError) as error:
                reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                raise StorageError(
                    f"Could not {doing} {probe if doing != 'create' else self.root}: {reason}."
                ) from None

    def job_env(self, key: str) -> dict[str, Any]:
        return {}


def _same(found: str | bytes, wanted: str | bytes) -> None:
    if found != wanted:
        raise StorageError("what was read back is not what was written")


@dataclass(frozen=True)
class S3Credentials:
    """A bucket's keys, as read from the location's Kubernetes Secret; never printed."""

    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:
        return "S3Credentials(set)"

    def redact(self, text: str) -> str:
        """``text`` without either key."""
        for value in (self.secret_access_key, self.access_key_id):
            if value:
                text = text.replace(value, "[redacted]")
        return text


async def read_credentials(cluster: ClusterAccess, location: BackupLocation) -> S3Credentials:
    """The bucket's keys from the location's Secret; raises StorageError naming the Secret and key."""
    from styrmin_backend.cluster.kube import ClusterError

    namespace, name = location.secret_namespace or "", location.secret_name or ""
    try:
        data = await cluster.read_secret(namespace, name)
    except ClusterError as error:
        raise StorageError(
            f"{error}. Create it with the keys {ACCESS_KEY_ID_KEY} and {SECRET_ACCESS_KEY_KEY}."
        ) from None
    missing = [k for k in (ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY) if not data.get(k)]
    if missing:
        raise StorageError(
            f"Secret {namespace}/{name} has no key {missing[0]}; add it (the bucket's credentials)."
        )
    return S3Credentials(data[ACCESS_KEY_ID_KEY], data[SECRET_ACCESS_KEY_KEY])


class S3Storage:
    """An S3-compatible bucket and prefix; the backup's Jobs still use a staging folder.

    boto3's managed transfers stream files in parts (``upload_file``/``download_file``), so a
    backup's size never shows in memory.
    """

    def __init__(self, location: BackupLocation, credentials: S3Credentials, staging_root: Path) -> None:
        try:
            import boto3
        except ImportError:  # S3 is the server distribution's extra: styrmin-server[s3]
            raise StorageError(
                "this agent cannot reach S3: boto3 is not installed; install styrmin-server[s3] "
                "(Styrmin's image has it)."
            ) from None
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.location = location
        self._credentials = credentials
        self.staging_root = staging_root.resolve()
        self.bucket = location.bucket or ""
        self._client = boto3.client(
            "s3",
            endpoint_url=location.endpoint_url,
            region_name=location.region or "us-east-1",
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key,
            config=Config(
                connect_timeout=10, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"}
            ),
        )
        self._transfer = TransferConfig(
            multipart_threshold=PART_BYTES,
            multipart_chunksize=PART_BYTES,
            max_concurrency=TRANSFER_THREADS,
            io_chunksize=CHUNK_BYTES,
        )

    def describe(self) -> str:
        return self.location.describe()

    def _key(self, key: str, name: str = "") -> str:
        return object_key(self.location.prefix, f"{key}/{name}" if name else key)

    def _url(self, object_name: str) -> str:
        return f"s3://{self.bucket}/{object_name}"

    def _failed(self, doing: str, object_name: str, error: Exception) -> StorageError:
        from botocore.exceptions import ClientError

        if isinstance(error, ClientError):
            details = error.response.get("Error", {})
            reason = f"{details.get('Code', 'error')}: {details.get('Message', '')}".rstrip(": ")
        else:
            reason = str(error) or type(error).__name__
        where = f" at {self.location.endpoint_url}" if self.location.endpoint_url else ""
        return StorageError(
            self._credentials.redact(f"Could not {doing} {self._url(object_name)}{where}: {reason}")
        )

    def staging(self, key: str) -> Path:
        return self.staging_root / key

    def where(self, key: str) -> str:
        return self.location.url(key)

    def prepare(self, key: str) -> Path:
        folder = self.staging(key)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _objects(self, key: str) -> dict[str, int]:
        """The backup's objects under its key, by file name, with their sizes."""
        prefix = self._key(key) + "/"
        found: dict[str, int] = {}
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for item in page.get("Contents", []):
                    found[str(item["Key"])[len(prefix) :]] = int(item["Size"])
                    if len(found) > MAX_BACKUP_FILES:
                        raise StorageError(f"{self._url(prefix)} holds more than {MAX_BACKUP_FILES} objects.")
        except StorageError:
            raise
        except Exception as error:
            raise self._failed("list", prefix, error) from None
        return found

    def publish(self, key: str) -> list[BackupFile]:
        folder = self.staging(key)
        stored: dict[str, BackupFile] = {}
        for name, path in _walk(folder):
            size, sha256 = _hash_file(path)
            target = self._key(key, name)
            try:
                self._client.upload_file(str(path), self.bucket, target, Config=self._transfer)
            except Exception as error:
                raise self._failed("upload to", target, error) from None
            stored[name] = BackupFile(name, size, sha256)
        # A Job may also have written straight to the bucket (STYRMIN_BACKUP_URL): hash those too.
        for name in self._objects(key):
            if name not in stored:
                stored[name] = BackupFile(check_file_name(name), *self._hash_object(self._key(key, name)))
        shutil.rmtree(folder, ignore_errors=True)
        return sorted(stored.values(), key=lambda f: f.name)

    def _hash_object(self, object_name: str) -> tuple[int, str]:
        digest = hashlib.sha256()
        size = 0
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=object_name)["Body"]
            for chunk in body.iter_chunks(CHUNK_BYTES):
                digest.update(chunk)
                size += len(chunk)
        except Exception as error:
            raise self._failed("read", object_name, error) from None
        return size, digest.hexdigest()

    def fetch(self, key: str, recorded: list[BackupFile]) -> list[str]:
        folder = self.prepare(key)
        there = self._objects(key)
        for wanted in recorded:
            if wanted.name not in there:
                continue  # missing_files names it
            target = folder / wanted.name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._client.download_file(
                    self.bucket, self._key(key, wanted.name), str(target), Config=self._transfer
                )
            except Exception as error:
                raise self._failed("download", self._key(key, wanted.name), error) from None
        return missing_files(recorded, folder_files(folder))

    def finish_restore(self, key: str) -> None:
        shutil.rmtree(self.staging(key), ignore_errors=True)

    def delete(self, key: str) -> None:
        names = list(self._objects(key))
        for start in range(0, len(names), 1000):
            batch = [{"Key": self._key(key, name)} for name in names[start : start + 1000]]
            try:
                self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except Exception as error:
                raise self._failed("delete objects under", self._key(key), error) from None
        shutil.rmtree(self.staging(key), ignore_errors=True)

    def probe(self) -> None:
        probe = object_key(self.location.prefix, PROBE_NAME)
        content = os.urandom(16)
        try:
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=content)
        except Exception as error:
            raise self._failed("write the probe object", probe, error) from None
        try:
            found = self._client.get_object(Bucket=self.bucket, Key=probe)["Body"].read()
            _same(found, content)
        except Exception as error:
            raise self._failed("read back the probe object", probe, error) from None
        try:
            self._client.delete_object(Bucket=self.bucket, Key=probe)
        except Exception as error:
            raise self._failed("delete the probe object", probe, error) from None

    def job_credentials(self) -> dict[str, str]:
        """The bucket's keys as a backup Job's Secret holds them."""
        return {
            "AWS_ACCESS_KEY_ID": self._credentials.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self._credentials.secret_access_key,
        }

    def job_env(self, key: str) -> dict[str, Any]:
        env = {
            "STYRMIN_BACKUP_URL": self.location.url(key),
            "AWS_REGION": self.location.region or "us-east-1",
        }
        if self.location.endpoint_url:
            env["AWS_ENDPOINT_URL_S3"] = self.location.endpoint_url
        return env


async def storage_for(
    location: dict[str, Any] | None, default: BackupFolder, cluster: ClusterAccess | None
) -> BackupStorage:
    """The storage of a stored location; None: the agent's own folder."""
    if location is None:
        return default
    parsed = BackupLocation.from_json(location)
    if parsed.kind is LocationKind.FOLDER:
        return BackupFolder(Path(parsed.folder or "/"))
    if cluster is None:
        raise StorageError("This agent cannot reach its cluster to read the bucket's credentials.")
    credentials = await read_credentials(cluster, parsed)
    return S3Storage(parsed, credentials, default.root / ".staging")
