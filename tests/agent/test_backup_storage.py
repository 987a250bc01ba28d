"""Backup storage locations as the agent uses them: a folder, and an S3-compatible bucket (moto on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from styrmin_backend.agent.backup_storage import (
    BackupFolder,
    S3Credentials,
    S3Storage,
    StorageError,
)
from styrmin_backend.domain.backup_locations import PROBE_NAME, check_location
from styrmin_backend.domain.backups import BackupFile
from tests.support.s3 import S3Server, s3_server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


def _storage(
    s3: S3Server, tmp_path: Path, *, bucket: str | None = None, prefix: str = "team/prod"
) -> S3Storage:
    location = check_location(
        "s3",
        bucket=bucket or s3.bucket,
        prefix=prefix,
        endpoint_url=s3.endpoint_url,
        secret="styrmin/backup-bucket",
    )
    return S3Storage(location, S3Credentials(s3.access_key_id, s3.secret_access_key), tmp_path / "staging")


def _write(folder: Path, name: str, content: bytes) -> BackupFile:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return BackupFile(name, len(content), hashlib.sha256(content).hexdigest())


def test_a_bucket_location_passes_its_check_and_leaves_no_probe_behind(s3: S3Server, tmp_path: Path) -> None:
    _storage(s3, tmp_path).probe()

    assert f"team/prod/{PROBE_NAME}" not in s3.object_keys()


def test_a_missing_bucket_fails_the_check_naming_what_failed(s3: S3Server, tmp_path: Path) -> None:
    storage = _storage(s3, tmp_path, bucket="no-such-bucket")

    with pytest.raises(StorageError) as failed:
        storage.probe()

    message = str(failed.value)
    assert message.startswith(
        f"Could not write the probe object s3://no-such-bucket/team/prod/{PROBE_NAME} at {s3.endpoint_url}: "
        "NoSuchBucket"
    )
    assert s3.secret_access_key not in message and s3.access_key_id not in message


def test_an_unreachable_endpoint_fails_the_check_without_credentials(s3: S3Server, tmp_path: Path) -> None:
    location = check_location(
        "s3", bucket=s3.bucket, endpoint_url="http://127.0.0.1:9", secret="styrmin/backup-bucket"
    )
    storage = S3Storage(location, S3Credentials(s3.access_key_id, s3.secret_access_key), tmp_path)

    with pytest.raises(StorageError) as failed:
        storage.probe()

    assert str(failed.value).startswith(f"Could not write the probe object s3://{s3.bucket}/{PROBE_NAME}")
    assert s3.secret_access_key not in str(failed.value)


def test_a_backup_goes_up_to_the_bucket_and_comes_back_for_a_restore(s3: S3Server, tmp_path: Path) -> None:
    storage = _storage(s3, tmp_path)
    staging = storage.prepare("shop/backup-1")
    big = os.urandom(20 << 20)  # above the part size: a multipart upload
    written = [_write(staging, "shop.sqlite3", big), _write(staging, "meta/schema-version", b"1.0.0\n")]

    recorded = storage.publish("shop/backup-1")

    assert recorded == sorted(written, key=lambda f: f.name)
    assert s3.object_keys("team/prod/shop/backup-1/") == [
        "team/prod/shop/backup-1/meta/schema-version",
        "team/prod/shop/backup-1/shop.sqlite3",
    ]
    assert not staging.exists()  # the agent keeps no copy once the bucket has it

    assert storage.fetch("shop/backup-1", recorded) == []
    assert (storage.staging("shop/backup-1") / "shop.sqlite3").read_bytes() == big
    storage.finish_restore("shop/backup-1")
    assert not storage.staging("shop/backup-1").exists()


def test_a_restore_names_the_object_that_is_gone_or_changed(s3: S3Server, tmp_path: Path) -> None:
    storage = _storage(s3, tmp_path)
    staging = storage.prepare("shop/backup-2")
    _write(staging, "a", b"one")
    _write(staging, "b", b"two")
    recorded = storage.publish("shop/backup-2")
    s3.client().delete_object(Bucket=s3.bucket, Key="team/prod/shop/backup-2/a")
    s3.client().put_object(Bucket=s3.bucket, Key="team/prod/shop/backup-2/b", Body=b"TWO")

    problems = storage.fetch("shop/backup-2", recorded)

    assert problems == ["a is missing", "b has another sha256 than the backup recorded"]


def test_deleting_a_backup_removes_its_objects_only(s3: S3Server, tmp_path: Path) -> None:
    storage = _storage(s3, tmp_path)
    for key in ("shop/backup-3", "shop/backup-4"):
        _write(storage.prepare(key), "db", b"data")
        storage.publish(key)

    storage.delete("shop/backup-3")
    storage.delete("shop/backup-3")  # nothing left to delete is not an error

    assert s3.object_keys("team/prod/shop/backup-3/") == []
    assert s3.object_keys("team/prod/shop/backup-4/") == ["team/prod/shop/backup-4/db"]


def test_a_folder_location_that_cannot_be_made_fails_its_check_naming_the_folder(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    root = tmp_path / "a-file" / "backups"

    with pytest.raises(StorageError) as failed:
        BackupFolder(root).probe()

    assert str(failed.value) == f"Could not create {root}: Not a directory."


def test_a_folder_location_passes_its_check(tmp_path: Path) -> None:
    BackupFolder(tmp_path / "new").probe()

    assert list((tmp_path / "new").iterdir()) == []
