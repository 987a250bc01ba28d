"""On the whole stack: a cluster's backups go to an S3-compatible bucket (moto on 127.0.0.1) set by an
administrator, come back from it on restore, and its credentials appear in no answer, page, log, Prefect
parameter or Job."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Namespace, Secret

import styrmin
from styrmin_backend.domain.backups import CHECK_FILES_STEP, DELETE_FILES_STEP, RECORD_FILES_STEP
from styrmin_backend.testing import StyrminStack, describe
from tests.support.drivers import EXAMPLE_DRIVER
from tests.support.s3 import S3Server, s3_server

from .test_backups import _add_order, _orders, _schema

pytestmark = pytest.mark.slow

CREDENTIALS = "backup-s3-credentials"


def _wait_checked(stack: StyrminStack, location: styrmin.BackupLocation) -> styrmin.BackupLocation:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        found = stack.client.backups.location("local")
        for candidate in (found.latest, found.in_use):
            if candidate is not None and candidate.id == location.id and candidate.status != "checking":
                return candidate
        time.sleep(0.5)
    raise AssertionError(f"The agent did not check backup location {location.id} within 3 minutes.")


@pytest.fixture
def s3(styrmin_stack: StyrminStack) -> Iterator[S3Server]:
    """A bucket whose keys are in a Secret of the cluster; the agent's own folder is the location again after."""
    stack = styrmin_stack
    with s3_server() as server:
        with contextlib.suppress(ApiError):  # made by an earlier test of this session
            stack.kube.create(Namespace(metadata=ObjectMeta(name=CREDENTIALS)))
        stack.kube.apply(
            Secret(
                metadata=ObjectMeta(name="bucket", namespace=CREDENTIALS),
                stringData={
                    "access_key_id": server.access_key_id,
                    "secret_access_key": server.secret_access_key,
                },
            ),
            force=True,
        )
        try:
            yield server
        finally:
            folder = stack.cluster.data_dir.parent / "agent" / "backups"
            back = stack.client.backups.set_location("local", folder=str(folder))
            assert _wait_checked(stack, back).status == "ready"


def test_backups_go_to_a_bucket_and_its_credentials_appear_nowhere(
    styrmin_stack: StyrminStack, s3: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    stack, name = styrmin_stack, "backup-s3"
    missing = stack.client.backups.set_location(
        "local",
        bucket=s3.bucket,
        prefix="styrmin",
        endpoint_url=s3.endpoint_url,
        secret=f"{CREDENTIALS}/nope",
    )
    refused = _wait_checked(stack, missing)
    assert refused.status == "failed"
    assert refused.error is not None and f"Secret {CREDENTIALS}/nope" in refused.error

    location = stack.client.backups.set_location(
        "local",
        bucket=s3.bucket,
        prefix="styrmin",
        endpoint_url=s3.endpoint_url,
        secret=f"{CREDENTIALS}/bucket",
    )
    assert _wait_checked(stack, location).status == "ready", location
    stack.push_driver(EXAMPLE_DRIVER, version="19.6.0")
    created = stack.create(name, driver="shop", driver_version="19.6.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    _add_order(stack, name, "before the backup")

    taken = stack.client.backups.create(name)
    backed_up = stack.wait(taken.task.id)

    assert backed_up.status == "succeeded", describe(backed_up)
    assert backed_up.steps[-1].name == RECORD_FILES_STEP
    backup = stack.client.backups.get(taken.backup.id)
    assert backup.location == f"s3://{s3.bucket}/styrmin at {s3.endpoint_url}"
    assert s3.object_keys(f"styrmin/{backup.key}/") == [
        f"styrmin/{backup.key}/schema-version",
        f"styrmin/{backup.key}/shop.sqlite3",
    ]
    _add_order(stack, name, "after the backup")

    restored = stack.wait(stack.client.deployments.restore(name, backup.id))

    assert restored.status == "succeeded", describe(restored)
    assert restored.steps[0].name == CHECK_FILES_STEP
    assert _orders(stack, name) == ["before the backup"]
    assert _schema(stack, name) == "1.0.0"
    # The restore's Job learnt where the backup is, and got the keys by reference only.
    jobs = list(stack.kube.list(Job, namespace=name))
    assert jobs
    container = jobs[-1].spec.template.spec.containers[0]
    env = {e.name: e.value for e in container.env or []}
    assert env["STYRMIN_BACKUP_URL"] == f"s3://{s3.bucket}/styrmin/{backup.key}/"
    assert [e.secretRef.name for e in container.envFrom or [] if e.secretRef] == ["styrmin-backup-location"]

    # Nowhere to be seen: API answers, pages, Prefect's flow runs, the Jobs, the logs.
    keys = (s3.secret_access_key, s3.access_key_id)
    seen = [
        stack.client.backups.location("local").model_dump_json(),
        json.dumps([b.model_dump(mode="json") for b in stack.client.backups.list(name)]),
        stack.client.tasks.get(backed_up.id).model_dump_json(),
        stack.client.tasks.get(restored.id).model_dump_json(),
        stack.client.deployments.get(name).model_dump_json(),
        json.dumps([j.to_dict() for j in jobs], default=str),
    ]
    with httpx.Client(base_url=stack.url, timeout=60) as web:
        login = web.post("/api/v1/auth/session", json={"username": "admin", "password": stack.admin_password})
        assert login.status_code == 201
        for page in (
            f"/deployments/{name}",
            f"/deployments/{name}/backups",
            f"/tasks/{backed_up.id}",
            f"/tasks/{restored.id}",
            "/clusters/local/backup-location",
        ):
            answer = web.get(page)
            assert answer.status_code == 200, page
            seen.append(answer.text)
        flow_runs = httpx.post(
            f"{stack.prefect_api_url}/flow_runs/filter",
            json={"sort": "EXPECTED_START_TIME_DESC", "limit": 50},
        ).json()
    assert any(name in json.dumps(run["parameters"]) for run in flow_runs)
    seen += [json.dumps(run["parameters"]) for run in flow_runs]
    seen.append(caplog.text)
    for text in seen:
        for key in keys:
            assert key not in text

    deleted = stack.wait(stack.client.backups.delete(backup.id))

    assert deleted.status == "succeeded", describe(deleted)
    assert (deleted.type, [s.name for s in deleted.steps]) == ("delete-backup", [DELETE_FILES_STEP])
    assert s3.object_keys(f"styrmin/{backup.key}/") == []
    with pytest.raises(styrmin.NotFoundError):
        stack.client.backups.get(backup.id)
